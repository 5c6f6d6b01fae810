// AdamW: config checks, the per-step scalars, the scalar reference kernel and the fast kernel
// (SSE2, 4 lanes, OpenMP over fixed pieces). The fast kernel does the same IEEE operations in the
// same order as the reference, so it is bit-identical. Explicit intrinsics rather than
// auto-vectorisation because std::sqrt only vectorises under -fno-math-errno, which the library
// does not set. AdamW moves 28 bytes per element for a dozen flops: memory-bound, so 4 lanes keep
// up with the memory system and wider vectors would buy little.
#include "mixtrain/optim/adamw.h"

#include <cmath>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "mixtrain/core/cpu_features.h"
#include "optim/optim_util.h"

namespace mixtrain {

using optim_detail::fmt;

void validate(const AdamWConfig& c) {
  optim_detail::check_nonneg("AdamW", "lr", c.lr);
  if (!(c.beta1 >= 0.f && c.beta1 < 1.f))
    throw ArgumentError("AdamW: beta1 must be in [0, 1), got " + fmt(c.beta1));
  if (!(c.beta2 >= 0.f && c.beta2 < 1.f))
    throw ArgumentError("AdamW: beta2 must be in [0, 1), got " + fmt(c.beta2));
  if (!(c.eps > 0.f) || !std::isfinite(c.eps))
    throw ArgumentError("AdamW: eps must be > 0 and finite, got " + fmt(c.eps));
  optim_detail::check_nonneg("AdamW", "weight_decay", c.weight_decay);
}

AdamWScalars adamw_scalars(const AdamWConfig& c, float lr, int64_t step) {
  // Python floats are doubles: torch forms these in double and each becomes an fp32 scalar
  // when it meets an fp32 tensor.
  const double lr_d = lr, b1 = c.beta1, b2 = c.beta2;
  const double bc1 = 1.0 - std::pow(b1, double(step));
  const double bc2 = 1.0 - std::pow(b2, double(step));
  AdamWScalars s;
  s.decay_factor = float(1.0 - lr_d * double(c.weight_decay));
  s.beta1_weight = float(1.0 - b1);
  s.beta2 = c.beta2;
  s.one_minus_beta2 = float(1.0 - b2);
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.eps = c.eps;
  s.neg_step_size = float(-(lr_d / bc1));
  return s;
}

namespace {

// One element, torch's operation order (see adamw.h). SmallW selects torch's lerp branch.
template <bool Decay, bool SmallW>
inline void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  float pp = p;
  if constexpr (Decay) pp = pp * s.decay_factor;
  const float mm = SmallW ? m + s.beta1_weight * (g - m) : g - (g - m) * (1.f - s.beta1_weight);
  const float vv = v * s.beta2 + (s.one_minus_beta2 * g) * g;
  const float denom = std::sqrt(vv) / s.bc2_sqrt + s.eps;
  p = pp + (s.neg_step_size * mm) / denom;
  m = mm;
  v = vv;
}

template <bool Decay, bool SmallW>
void adamw_span_ref(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  for (int64_t i = 0; i < n; ++i) adamw_element<Decay, SmallW>(p[i], g[i], m[i], v[i], s);
}

template <bool Decay, bool SmallW>
void adamw_span_fast(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 decay = _mm_set1_ps(s.decay_factor), w = _mm_set1_ps(s.beta1_weight);
  const __m128 one_minus_w = _mm_set1_ps(1.f - s.beta1_weight), b2 = _mm_set1_ps(s.beta2);
  const __m128 c2 = _mm_set1_ps(s.one_minus_beta2), bc2s = _mm_set1_ps(s.bc2_sqrt);
  const __m128 eps = _mm_set1_ps(s.eps), nss = _mm_set1_ps(s.neg_step_size);
  for (; i + 4 <= n; i += 4) {
    __m128 pp = _mm_loadu_ps(p + i);
    const __m128 gg = _mm_loadu_ps(g + i), m0 = _mm_loadu_ps(m + i), v0 = _mm_loadu_ps(v + i);
    if constexpr (Decay) pp = _mm_mul_ps(pp, decay);
    const __m128 d = _mm_sub_ps(gg, m0);
    const __m128 mm = SmallW ? _mm_add_ps(m0, _mm_mul_ps(w, d)) : _mm_sub_ps(gg, _mm_mul_ps(d, one_minus_w));
    const __m128 vv = _mm_add_ps(_mm_mul_ps(v0, b2), _mm_mul_ps(_mm_mul_ps(c2, gg), gg));
    const __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vv), bc2s), eps);
    _mm_storeu_ps(p + i, _mm_add_ps(pp, _mm_div_ps(_mm_mul_ps(nss, mm), denom)));
    _mm_storeu_ps(m + i, mm);
    _mm_storeu_ps(v + i, vv);
  }
#endif
  for (; i < n; ++i) adamw_element<Decay, SmallW>(p[i], g[i], m[i], v[i], s);  // tail
}

// Calls span_fn<Decay, SmallW> with the flags as compile-time constants.
template <template <bool, bool> class F>
void dispatch(bool decay, bool small_w, float* p, const float* g, float* m, float* v, int64_t n,
              const AdamWScalars& s) {
  if (decay) {
    small_w ? F<true, true>::run(p, g, m, v, n, s) : F<true, false>::run(p, g, m, v, n, s);
  } else {
    small_w ? F<false, true>::run(p, g, m, v, n, s) : F<false, false>::run(p, g, m, v, n, s);
  }
}
template <bool D, bool W>
struct RefSpan {
  static void run(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
    adamw_span_ref<D, W>(p, g, m, v, n, s);
  }
};
template <bool D, bool W>
struct FastSpan {
  static void run(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
    adamw_span_fast<D, W>(p, g, m, v, n, s);
  }
};

// torch's is_lerp_weight_small.
bool lerp_weight_small(float w) { return std::abs(w) < 0.5f; }

}  // namespace

void adamw_update_ref(float* p, const float* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s) {
  const bool small_w = lerp_weight_small(s.beta1_weight);
  for (const FlatSpan& sp : spans)
    dispatch<RefSpan>(sp.decay, small_w, p + sp.offset, g + sp.offset, m + sp.offset, v + sp.offset, sp.numel, s);
}

void adamw_update(float* p, const float* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s) {
  const bool small_w = lerp_weight_small(s.beta1_weight);
  const std::vector<FlatSpan> pieces = split_spans(spans, optim_detail::kPieceNumel);
  const int64_t n = int64_t(pieces.size());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    const FlatSpan& sp = pieces[size_t(i)];
    dispatch<FastSpan>(sp.decay, small_w, p + sp.offset, g + sp.offset, m + sp.offset, v + sp.offset, sp.numel, s);
  }
}

AdamW::AdamW(const ParameterStore& store, AdamWConfig config) : config_(config) {
  validate(config_);
  if (!store.finalized()) throw ArgumentError("AdamW: the parameter store is not finalized");
  flat_numel_ = store.flat_numel();
  spans_ = flat_spans(store);
  m_ = Tensor::zeros({flat_numel_}, DType::f32, MemCategory::optimizer_state);
  v_ = Tensor::zeros({flat_numel_}, DType::f32, MemCategory::optimizer_state);
}

void AdamW::step(ParameterStore& store, float lr) {
  optim_detail::check_nonneg("AdamW::step", "lr", lr);
  optim_detail::check_store(store, flat_numel_, "AdamW::step");
  const int64_t t = steps_ + 1;
  const AdamWScalars s = adamw_scalars(config_, lr, t);
  float* p = store.flat_params().data<float>();
  const float* g = store.flat_grads().data<float>();
  if (force_reference())
    adamw_update_ref(p, g, m_.data<float>(), v_.data<float>(), spans_, s);
  else
    adamw_update(p, g, m_.data<float>(), v_.data<float>(), spans_, s);
  steps_ = t;
}

void AdamW::set_state(int64_t steps, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  if (steps < 0) throw ArgumentError("AdamW::set_state: steps must be >= 0, got " + std::to_string(steps));
  for (const Tensor* t : {&exp_avg, &exp_avg_sq})
    if (!t->defined() || t->shape() != Shape{flat_numel_})
      throw ShapeError("AdamW::set_state: moments must have shape (" + std::to_string(flat_numel_) + "), got " +
                       (t->defined() ? t->to_string() : std::string("an undefined tensor")));
  m_.copy_from(exp_avg);
  v_.copy_from(exp_avg_sq);
  steps_ = steps;
}

}  // namespace mixtrain
