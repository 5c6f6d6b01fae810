// Reverse-mode automatic differentiation: Var is a tensor that remembers how it was made.
// Ops in autograd/functions.h record one Node per call (the op kind, its inputs and what backward
// needs); backward() from a scalar loss walks the recorded graph in reverse topological order,
// applies each op's backward rule (one table, autograd/backward_rules.cpp) and accumulates
// gradients into every input that requires them. Parameters are leaves whose gradient buffer is
// a view into the ParameterStore's flat gradient arena, so gradients accumulate there. The graph
// (and every saved tensor) is freed as backward passes it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain::autograd {

struct Node;

// The value of an intermediate is released when the last Var referring to it goes away (see
// Var::Handle): the graph keeps only what backward needs (Node::in_values, Node::saved), so an
// activation no backward rule reads is freed as soon as the forward pass is done with it.
struct VarImpl {
  Tensor value;  // undefined once released
  Shape shape;   // value's shape and dtype, kept after the value is released
  DType dtype = DType::f32;
  Tensor grad;  // undefined until backward reaches it (params: arena view)
  bool requires_grad = false;
  bool grad_is_buffer = false;  // grad is a caller-owned buffer to accumulate into (parameters)
  // The 16-bit copy of a parameter that autocast made for one op (the cast's only consumer):
  // backward rules accumulate its gradient straight into the parameter's fp32 buffer.
  bool param_cast = false;
  std::shared_ptr<Node> grad_fn;  // the op that made value; null for leaves
};

class Var {
 public:
  Var() = default;
  // A leaf: an input (requires_grad false) or a variable to differentiate by.
  explicit Var(Tensor value, bool requires_grad = false);
  // A parameter leaf whose gradient accumulates into `grad_buffer` (same shape).
  static Var parameter(Tensor value, Tensor grad_buffer);

  bool defined() const { return h_ != nullptr; }
  const Tensor& value() const { return h_->impl->value; }
  const Tensor& grad() const { return h_->impl->grad; }
  bool requires_grad() const { return h_ && h_->impl->requires_grad; }
  const Shape& shape() const { return h_->impl->value.shape(); }
  DType dtype() const { return h_->impl->value.dtype(); }
  int64_t size(int d) const { return h_->impl->value.size(d); }
  const std::shared_ptr<VarImpl>& impl() const;

  // Backpropagates from this scalar (1-element) variable with d(self)/d(self) = 1 (or `seed`,
  // e.g. the loss scale in mixed precision). Frees the graph as it goes.
  void backward(double seed = 1.0) const;
  // Backpropagates from this variable with d(loss)/d(self) = grad (its shape), e.g. from inside
  // another op's backward rule (activation checkpointing). Reentrant.
  void backward_from(const Tensor& grad) const;

 private:
  // Every copy of a Var shares one Handle; when the last one goes, nobody outside the graph can
  // read the value any more, so the Handle releases it (nodes hold their own references to the
  // values their backward reads).
  struct Handle {
    std::shared_ptr<VarImpl> impl;
    ~Handle();
  };
  std::shared_ptr<Handle> h_;
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

// Called during backward when a parameter's gradient (a view into its gradient buffer, see
// Var::parameter) is final for this backward pass: every op that used the parameter has added
// its contribution. Data parallelism starts reducing a bucket of gradients from here while the
// rest of backward runs (as PyTorch DDP's autograd hooks). Thread-local; the scope restores the
// previous callback.
// Inside a FreshGradScope (on this thread) a backward pass makes each parameter's gradient from
// zeros, in a tensor of the parameter's size taken at the first write, and adds it to the
// parameter's buffer when the gradient is final, just before the GradReadyFn sees the buffer (and
// frees it): PyTorch's AccumulateGrad. Gradient accumulation over micro-batches then adds finished
// gradients, as a sum over data-parallel ranks does, instead of adding inside the kernels; the
// extra memory is the parameters whose gradients are in progress at a time.
class FreshGradScope {
 public:
  FreshGradScope();
  ~FreshGradScope();  // a pass cut short: its unfinished gradients are dropped
  FreshGradScope(const FreshGradScope&) = delete;
  FreshGradScope& operator=(const FreshGradScope&) = delete;
};

// ZeRO stage 2 (train/data_parallel.h): while one is alive on this thread, backward makes every
// parameter's gradient of a pass from zeros in a tensor of its own (as inside a FreshGradScope,
// which it overrides), one place() gives (a zeroed tensor of the parameter's shape, or undefined
// for a new one), and once final hands it to done() with the parameter's gradient-buffer view
// (which names the parameter) instead of adding it to the buffer: the buffer is never touched (a
// rank holds only its part of it) and done() owns the tensor. A parameter that backward reached
// but no op gave a gradient is handed an undefined tensor. No GradReadyFn is called.
struct GradHandoff {
  std::function<Tensor(const Tensor& buffer)> place;
  std::function<void(const Tensor& buffer, Tensor grad)> done;
};
class GradHandoffScope {
 public:
  explicit GradHandoffScope(GradHandoff handoff);
  ~GradHandoffScope();
  GradHandoffScope(const GradHandoffScope&) = delete;
  GradHandoffScope& operator=(const GradHandoffScope&) = delete;

 private:
  GradHandoff prev_;
};

using GradReadyFn = std::function<void(const Tensor& grad)>;
class GradReadyScope {
 public:
  explicit GradReadyScope(GradReadyFn fn);
  ~GradReadyScope();
  GradReadyScope(const GradReadyScope&) = delete;
  GradReadyScope& operator=(const GradReadyScope&) = delete;

 private:
  GradReadyFn prev_;
};

}  // namespace mixtrain::autograd
