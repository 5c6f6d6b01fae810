// Reverse-mode automatic differentiation: Var is a tensor that remembers how it was made.
// Ops in autograd/functions.h record one Node per call (the op kind, its inputs and what backward
// needs); backward() from a scalar loss walks the recorded graph in reverse topological order,
// applies each op's backward rule (one table, autograd/backward_rules.cpp) and accumulates
// gradients into every input that requires them. Parameters are leaves whose gradient buffer is
// a view into the ParameterStore's flat gradient arena, so gradients accumulate there. The graph
// (and every saved tensor) is freed as backward passes it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain::autograd {

struct Node;

struct VarImpl {
  Tensor value;
  Tensor grad;                     // undefined until backward reaches it (params: arena view)
  bool requires_grad = false;
  bool grad_is_buffer = false;     // grad is a caller-owned buffer to accumulate into (parameters)
  std::shared_ptr<Node> grad_fn;   // the op that made value; null for leaves
};

class Var {
 public:
  Var() = default;
  // A leaf: an input (requires_grad false) or a variable to differentiate by.
  explicit Var(Tensor value, bool requires_grad = false);
  // A parameter leaf whose gradient accumulates into `grad_buffer` (same shape).
  static Var parameter(Tensor value, Tensor grad_buffer);
  static Var from_impl(std::shared_ptr<VarImpl> impl);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  const Tensor& grad() const { return impl_->grad; }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  const Shape& shape() const { return impl_->value.shape(); }
  DType dtype() const { return impl_->value.dtype(); }
  int64_t size(int d) const { return impl_->value.size(d); }
  const std::shared_ptr<VarImpl>& impl() const { return impl_; }

  // Backpropagates from this scalar (1-element) variable with d(self)/d(self) = 1 (or `seed`,
  // e.g. the loss scale in mixed precision). Frees the graph as it goes.
  void backward(double seed = 1.0) const;

 private:
  std::shared_ptr<VarImpl> impl_;
};

// Gradient recording switch (thread-local, like torch.no_grad / torch.enable_grad).
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mixtrain::autograd
