// SGD with momentum: config checks, the scalar reference and the OpenMP kernel. The element
// function is one template instantiated per (decay, mode, nesterov), so each inner loop is
// branch-free and auto-vectorises (no sqrt or division here, unlike AdamW).
#include "mixtrain/optim/sgd.h"

#include <cmath>
#include <string>

#include "mixtrain/core/cpu_features.h"
#include "optim/optim_util.h"

namespace mixtrain {

void validate(const SgdConfig& c) {
  optim_detail::check_nonneg("SGD", "lr", c.lr);
  optim_detail::check_nonneg("SGD", "momentum", c.momentum);
  optim_detail::check_nonneg("SGD", "dampening", c.dampening);
  optim_detail::check_nonneg("SGD", "weight_decay", c.weight_decay);
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    throw ArgumentError("SGD: nesterov needs momentum > 0 and dampening == 0, got momentum " +
                        optim_detail::fmt(c.momentum) + ", dampening " + optim_detail::fmt(c.dampening));
}

namespace {

enum Mode { kPlain, kFirstMomentum, kMomentum };

template <bool Decay, int M, bool Nesterov>
void sgd_span(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
              const SgdScalars& s) {
  const float wd = s.weight_decay, mom = s.momentum, omd = s.one_minus_damp, neg_lr = s.neg_lr;
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (Decay) d = d + wd * p[i];
    if constexpr (M != kPlain) {
      const float b = M == kFirstMomentum ? d : buf[i] * mom + omd * d;
      buf[i] = b;
      d = Nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <bool Decay>
void sgd_span_mode(float* p, const float* g, float* buf, int64_t n, const SgdScalars& s) {
  if (s.momentum == 0.f) return sgd_span<Decay, kPlain, false>(p, g, buf, n, s);
  if (s.first_step)
    return s.nesterov ? sgd_span<Decay, kFirstMomentum, true>(p, g, buf, n, s)
                      : sgd_span<Decay, kFirstMomentum, false>(p, g, buf, n, s);
  return s.nesterov ? sgd_span<Decay, kMomentum, true>(p, g, buf, n, s)
                    : sgd_span<Decay, kMomentum, false>(p, g, buf, n, s);
}

void sgd_one_span(float* p, const float* g, float* buf, const FlatSpan& sp, const SgdScalars& s) {
  // torch skips the decay term when weight_decay == 0 (adding 0*p would turn -0 into +0).
  const bool decay = sp.decay && s.weight_decay != 0.f;
  float* b = buf ? buf + sp.offset : nullptr;
  if (decay)
    sgd_span_mode<true>(p + sp.offset, g + sp.offset, b, sp.numel, s);
  else
    sgd_span_mode<false>(p + sp.offset, g + sp.offset, b, sp.numel, s);
}

}  // namespace

void sgd_update_ref(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s) {
  for (const FlatSpan& sp : spans) sgd_one_span(p, g, buf, sp, s);
}

void sgd_update(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s) {
  const std::vector<FlatSpan> pieces = split_spans(spans, optim_detail::kPieceNumel);
  const int64_t n = int64_t(pieces.size());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i) sgd_one_span(p, g, buf, pieces[size_t(i)], s);
}

SGD::SGD(const ParameterStore& store, SgdConfig config) : config_(config) {
  validate(config_);
  if (!store.finalized()) throw ArgumentError("SGD: the parameter store is not finalized");
  flat_numel_ = store.flat_numel();
  spans_ = flat_spans(store);
  if (config_.momentum != 0.f) buf_ = Tensor::zeros({flat_numel_}, DType::f32, MemCategory::optimizer_state);
}

void SGD::step(ParameterStore& store, float lr) {
  optim_detail::check_nonneg("SGD::step", "lr", lr);
  optim_detail::check_store(store, flat_numel_, "SGD::step");
  SgdScalars s;
  s.neg_lr = -lr;
  s.weight_decay = config_.weight_decay;
  s.momentum = config_.momentum;
  s.one_minus_damp = float(1.0 - double(config_.dampening));
  s.first_step = steps_ == 0;
  s.nesterov = config_.nesterov;
  float* p = store.flat_params().data<float>();
  const float* g = store.flat_grads().data<float>();
  float* buf = buf_.defined() ? buf_.data<float>() : nullptr;
  if (force_reference())
    sgd_update_ref(p, g, buf, spans_, s);
  else
    sgd_update(p, g, buf, spans_, s);
  ++steps_;
}

void SGD::set_state(int64_t steps, const Tensor& momentum_buffer) {
  if (steps < 0) throw ArgumentError("SGD::set_state: steps must be >= 0, got " + std::to_string(steps));
  if (buf_.defined()) {
    if (!momentum_buffer.defined() || momentum_buffer.shape() != Shape{flat_numel_})
      throw ShapeError("SGD::set_state: momentum_buffer must have shape (" + std::to_string(flat_numel_) + "), got " +
                       (momentum_buffer.defined() ? momentum_buffer.to_string() : std::string("an undefined tensor")));
    buf_.copy_from(momentum_buffer);
  }
  steps_ = steps;
}

}  // namespace mixtrain
