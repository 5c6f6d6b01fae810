// SGD with momentum: config checks, the fp32 scalar reference and OpenMP kernels, and the class
// (which picks the fp32 or the 16-bit kernels, sgd_lowp.cpp, by the store's dtype). The element
// loop (optim/sgd_kernel.h) is one template per (decay, mode, nesterov), so each inner loop is
// branch-free and auto-vectorises (no sqrt or division here, unlike AdamW).
#include "mixtrain/optim/sgd.h"

#include <cmath>
#include <string>

#include "mixtrain/core/cpu_features.h"
#include "optim/lowp_kernel.h"
#include "optim/optim_util.h"
#include "optim/sgd_kernel.h"
#include "mixtrain/core/profiler.h"

namespace mixtrain {

void validate(const SgdConfig& c) {
  optim_detail::check_nonneg("SGD", "lr", c.lr);
  optim_detail::check_nonneg("SGD", "momentum", c.momentum);
  optim_detail::check_nonneg("SGD", "dampening", c.dampening);
  optim_detail::check_nonneg("SGD", "weight_decay", c.weight_decay);
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    throw ArgumentError("SGD: nesterov needs momentum > 0 and dampening == 0, got momentum " +
                        optim_detail::fmt(c.momentum) + ", dampening " + optim_detail::fmt(c.dampening));
  optim_detail::check_rounding("SGD", c.rounding);
}

namespace {
void sgd_one_span(float* p, const float* g, float* buf, const FlatSpan& sp, const SgdScalars& s,
                  const WorkingCopyOut& working) {
  const int64_t o = sp.offset;
  optim_detail::sgd_span_f32(p + o, g + o, buf ? buf + o : nullptr, sp.numel, sp.decay, s);
  write_working_copy(p, working, o, sp.numel);
}
}  // namespace

void sgd_update_ref(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                    const WorkingCopyOut& working) {
  for (const FlatSpan& sp : spans) sgd_one_span(p, g, buf, sp, s, working);
}

void sgd_update(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working) {
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) { sgd_one_span(p, g, buf, sp, s, working); });
}

SGD::SGD(const ParameterStore& store, SgdConfig config) : config_(config) {
  validate(config_);
  if (!store.finalized()) throw ArgumentError("SGD: the parameter store is not finalized");
  dtype_ = optim_detail::optimizer_param_dtype(store, "SGD");
  flat_numel_ = store.flat_numel();
  spans_ = flat_spans(store);
  if (config_.momentum != 0.f) buf_ = Tensor::zeros({flat_numel_}, dtype_, MemCategory::optimizer_state);
  if (dtype_ != DType::f32 && config_.rounding == UpdateRounding::kahan)
    c_ = Tensor::zeros({flat_numel_}, dtype_, MemCategory::optimizer_state);
}

namespace {
// The 16-bit step for storage type T.
template <class T>
void sgd_step_lowp(ParameterStore& store, const Tensor& buf, const Tensor& c, const std::vector<FlatSpan>& spans,
                   const SgdScalars& s, const LowpWrite& w) {
  T* p = store.flat_params().data<T>();
  const T* g = store.flat_grads().data<T>();
  T* b = buf.defined() ? buf.data<T>() : nullptr;
  T* cc = c.defined() ? c.data<T>() : nullptr;
  if (force_reference())
    sgd_update_ref(p, g, b, cc, spans, s, w);
  else
    sgd_update(p, g, b, cc, spans, s, w);
}
}  // namespace

void SGD::step(ParameterStore& store, float lr, Tensor* working) {
  ProfileScope prof(WorkKind::optimizer);
  optim_detail::check_nonneg("SGD::step", "lr", lr);
  optim_detail::check_store(store, flat_numel_, dtype_, "SGD::step");
  const WorkingCopyOut w = working_copy_out(working, flat_numel_, "SGD::step");
  if (w && dtype_ != DType::f32) throw ArgumentError("SGD::step: a working copy is for fp32 master weights");
  SgdScalars s;
  s.neg_lr = -lr;
  s.weight_decay = config_.weight_decay;
  s.momentum = config_.momentum;
  s.one_minus_damp = float(1.0 - double(config_.dampening));
  s.first_step = steps_ == 0;
  s.nesterov = config_.nesterov;
  if (dtype_ == DType::f32) {
    float* p = store.flat_params().data<float>();
    const float* g = store.flat_grads().data<float>();
    float* buf = buf_.defined() ? buf_.data<float>() : nullptr;
    if (force_reference())
      sgd_update_ref(p, g, buf, spans_, s, w);
    else
      sgd_update(p, g, buf, spans_, s, w);
  } else {
    const LowpWrite lw{config_.rounding, config_.seed, uint64_t(steps_) * uint64_t(flat_numel_)};
    if (dtype_ == DType::bf16)
      sgd_step_lowp<bf16>(store, buf_, c_, spans_, s, lw);
    else
      sgd_step_lowp<fp16>(store, buf_, c_, spans_, s, lw);
  }
  store.flat_params().storage()->bump_version();  // cached casts of the old weights are stale now
  ++steps_;
}

int64_t SGD::state_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t : {&buf_, &c_})
    if (t->defined()) bytes += int64_t(t->nbytes());
  return bytes;
}

void SGD::set_state(int64_t steps, const Tensor& momentum_buffer, const Tensor& compensation) {
  if (steps < 0) throw ArgumentError("SGD::set_state: steps must be >= 0, got " + std::to_string(steps));
  if (buf_.defined() && (!momentum_buffer.defined() || momentum_buffer.shape() != Shape{flat_numel_}))
    throw ShapeError("SGD::set_state: momentum_buffer must have shape (" + std::to_string(flat_numel_) + "), got " +
                     (momentum_buffer.defined() ? momentum_buffer.to_string() : std::string("an undefined tensor")));
  if (c_.defined() && compensation.defined() && compensation.shape() != Shape{flat_numel_})
    throw ShapeError("SGD::set_state: compensation must have shape (" + std::to_string(flat_numel_) + "), got " +
                     compensation.to_string());
  if (buf_.defined()) buf_.copy_from(momentum_buffer);
  if (c_.defined()) {
    if (compensation.defined())
      c_.copy_from(compensation);
    else
      c_.zero();
  }
  steps_ = steps;
}

}  // namespace mixtrain
