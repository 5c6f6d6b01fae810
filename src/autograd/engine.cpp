// The autograd engine: Var, the grad-mode switch, gradient accumulation and the backward walk.
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "autograd/probe_hook.h"
#include "kernels/ops_backward.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/kernels/ops.h"
#include "tensor/alloc_site.h"

namespace mixtrain::autograd {

namespace {
thread_local bool g_grad_enabled = true;
thread_local GradReadyFn g_grad_ready;
// FreshGradScope: each parameter's gradient of this backward pass, until it is final.
thread_local std::unique_ptr<std::unordered_map<VarImpl*, Tensor>> g_fresh;
// GradHandoffScope: where final gradients go, and (as g_fresh) the ones in progress.
thread_local GradHandoff g_handoff;
thread_local std::unordered_map<VarImpl*, Tensor> g_handoff_fresh;

// The parameter's gradient of this pass in `fresh`: at its first use the tensor `place` gives (when
// given and it gives one), else zeros of its own.
Tensor& fresh_grad(std::unordered_map<VarImpl*, Tensor>& fresh, VarImpl& in,
                   const std::function<Tensor(const Tensor&)>& place = nullptr) {
  auto [it, first] = fresh.try_emplace(&in);
  if (first) {
    if (place) it->second = place(in.grad);
    if (!it->second.defined()) {
      const ScopedOp site("micro-batch gradient");  // named in memory reports
      it->second = Tensor::zeros(in.shape, in.grad.dtype(), MemCategory::gradients);
    } else if (!(it->second.shape() == in.shape) || it->second.dtype() != in.grad.dtype()) {
      throw ShapeError("autograd: the gradient's place " + it->second.to_string() + " does not match " +
                       in.grad.to_string());
    }
  }
  return it->second;
}

// The parameter's finished gradient of this pass, out of `fresh` (undefined if no op gave one).
Tensor take_fresh(std::unordered_map<VarImpl*, Tensor>& fresh, VarImpl* v) {
  const auto found = fresh.find(v);
  if (found == fresh.end()) return Tensor();
  Tensor g = std::move(found->second);
  fresh.erase(found);
  return g;
}
}  // namespace

FreshGradScope::FreshGradScope() {
  if (g_fresh) throw ArgumentError("FreshGradScope: already inside one");
  g_fresh = std::make_unique<std::unordered_map<VarImpl*, Tensor>>();
}
FreshGradScope::~FreshGradScope() { g_fresh.reset(); }

Tensor& param_grad(VarImpl& in) {
  if (!in.grad_is_buffer) return in.grad;
  if (g_handoff.done) return fresh_grad(g_handoff_fresh, in, g_handoff.place);
  if (g_fresh) return fresh_grad(*g_fresh, in);
  return in.grad;
}

GradHandoffScope::GradHandoffScope(GradHandoff handoff) : prev_(std::move(g_handoff)) {
  g_handoff = std::move(handoff);
  g_handoff_fresh.clear();
}
GradHandoffScope::~GradHandoffScope() {
  g_handoff = std::move(prev_);
  g_handoff_fresh.clear();
}

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }
GradReadyScope::GradReadyScope(GradReadyFn fn) : prev_(std::move(g_grad_ready)) {
  g_grad_ready = std::move(fn);
}
GradReadyScope::~GradReadyScope() { g_grad_ready = std::move(prev_); }

Var::Var(Tensor value, bool requires_grad) : h_(std::make_shared<Handle>()) {
  h_->impl = std::make_shared<VarImpl>();
  VarImpl& v = *h_->impl;
  v.shape = value.shape();
  v.dtype = value.dtype();
  v.value = std::move(value);
  v.requires_grad = requires_grad;
}

Var::Handle::~Handle() {
  // Still referenced by the graph (as some node's input): the value goes, the edge stays.
  if (impl && impl.use_count() > 1) impl->value = Tensor();
}

const std::shared_ptr<VarImpl>& Var::impl() const {
  static const std::shared_ptr<VarImpl> none;
  return h_ ? h_->impl : none;
}

Var Var::parameter(Tensor value, Tensor grad_buffer) {
  if (!(value.shape() == grad_buffer.shape()))
    throw ShapeError("Var::parameter: value " + value.to_string() + " and gradient buffer " +
                     grad_buffer.to_string() + " differ in shape");
  Var v(std::move(value), true);
  v.h_->impl->grad = std::move(grad_buffer);
  v.h_->impl->grad_is_buffer = true;
  return v;
}

namespace {
// Whether nothing but `in` holds its gradient's storage (the autograd made it, no other gradient,
// caller or view shares it), so it may be written in place.
bool owns_grad(const VarImpl& in) { return in.grad.storage().use_count() == 1; }
}  // namespace

void accumulate_grad(VarImpl& in, const Tensor& g) {
  if (!in.requires_grad) return;
  if (!(g.shape() == in.shape))
    throw ShapeError("autograd: gradient " + g.to_string() + " does not match its input's shape " +
                     in.shape.to_string());
  if (in.grad_is_buffer) {
    add_inplace(param_grad(in), g);
    return;
  }
  if (!in.grad.defined()) {
    // Take g as it is when it already has the input's dtype (it may be shared with another
    // input's gradient, e.g. both operands of an add: never written in place, see below).
    in.grad = g.dtype() == in.dtype ? g : g.to(in.dtype, MemCategory::activations);
    return;
  }
  // A later contribution: in place when nothing else holds the gradient (we made it), else a fresh
  // sum (one pass, fp32 math), so a tensor shared with another gradient is not modified.
  if (owns_grad(in)) {
    add_inplace(in.grad, g);
    return;
  }
  Tensor sum = Tensor::empty(in.grad.shape(), in.grad.dtype(), MemCategory::activations);
  add(in.grad, g, sum);
  in.grad = sum;
}

Tensor& grad_accumulator(VarImpl& in) {
  if (in.grad_is_buffer) return param_grad(in);
  if (!in.grad.defined())
    in.grad = Tensor::zeros(in.shape, in.dtype, MemCategory::activations);
  else if (!owns_grad(in))
    in.grad = in.grad.clone(MemCategory::activations);
  return in.grad;
}

void Var::backward(double seed) const {
  const std::shared_ptr<VarImpl>& impl_ = impl();
  if (!impl_) throw ArgumentError("backward: undefined variable");
  if (impl_->value.numel() != 1)
    throw ShapeError("backward: needs a scalar (1-element) loss, got " + impl_->value.to_string());
  if (!impl_->requires_grad)
    throw ArgumentError("backward: the loss does not require grad (no parameters in its graph)");
  backward_from(Tensor::full(impl_->value.shape(),
                             impl_->value.dtype() == DType::f64 ? DType::f64 : DType::f32, seed,
                             MemCategory::activations));
}

void Var::backward_from(const Tensor& grad) const {
  const std::shared_ptr<VarImpl>& impl_ = impl();
  if (!impl_) throw ArgumentError("backward: undefined variable");
  if (!impl_->requires_grad) throw ArgumentError("backward: the variable does not require grad");

  // Reverse topological order by an iterative depth-first search (no recursion: deep graphs).
  // `order` holds strong references: freeing a node during the walk may drop the last other
  // reference to one of its inputs, which is visited later.
  std::vector<std::shared_ptr<VarImpl>> order;
  std::unordered_set<VarImpl*> seen;
  std::vector<std::pair<std::shared_ptr<VarImpl>, size_t>> stack{{impl_, 0}};
  seen.insert(impl_.get());
  while (!stack.empty()) {
    auto& [v, next] = stack.back();
    const Node* n = v->grad_fn.get();
    if (n && next < n->inputs.size()) {
      const std::shared_ptr<VarImpl>& child = n->inputs[next++];
      if (child->requires_grad && seen.insert(child.get()).second) stack.push_back({child, 0});
    } else {
      order.push_back(std::move(v));
      stack.pop_back();
    }
  }

  g_handoff_fresh.clear();  // a pass cut short by an exception left its gradients in progress
  accumulate_grad(*impl_, grad);
  // Each variable comes after every op that consumed it, so once its own rule has run nothing
  // needs it: dropping our reference frees its value (the activation) and its gradient.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VarImpl* v = it->get();
    if (v->grad_fn) {
      std::shared_ptr<Node> node = std::move(v->grad_fn);
      if (v->grad.defined()) {
        AllocSite named = alloc_site();  // keeps the step and phase
        named.module = node->module;
        named.op = op_kind_name(node->op).data();
        named.backward = true;
        const ScopedAllocSite site(named);
        ProbeHook* probe = probe_hook();  // a sampled step's numerics probe (autograd/probe_hook.h)
        if (probe) probe->backward_input(*node, v->grad);
        backward_rule(node->op)(*node, v->grad);
        if (probe) probe->backward_done(*node);
      }
      v->grad = Tensor();  // intermediate gradients are not kept (leaves keep theirs)
    } else if (v->grad_is_buffer) {
      // A parameter: every op that used it came before (reverse order).
      if (g_handoff.done) {
        g_handoff.done(v->grad, take_fresh(g_handoff_fresh, v));
      } else {
        if (g_fresh)
          if (const Tensor g = take_fresh(*g_fresh, v); g.defined())
            add_inplace(v->grad, g);  // the buffer's sum so far + this pass's gradient
        if (g_grad_ready) g_grad_ready(v->grad);
      }
    }
    it->reset();
  }
}

}  // namespace mixtrain::autograd
