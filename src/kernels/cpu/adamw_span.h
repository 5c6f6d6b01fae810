// The fp32 AdamW element update and its SSE2 span loop, private to the kernels: the fp32 kernels
// (adamw_cpu.cpp) run them on the flat buffers, the 16-bit kernels on fp32 copies of 16-bit
// chunks, so both precisions compute the update with the very same operations. Explicit
// intrinsics rather than auto-vectorisation because std::sqrt only vectorises under
// -fno-math-errno, which the library does not set. AdamW moves 28 bytes per element for a dozen
// flops: memory-bound, so 4 lanes keep up with the memory system and wider vectors buy little.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "mixtrain/kernels/optimizer_kernels.h"

namespace mixtrain::optim_detail {

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

// p, g, m, v: (n) f32. 4 lanes of the same IEEE operations in the same order as adamw_element,
// then the scalar tail: bit-identical to adamw_span_ref.
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

// torch's is_lerp_weight_small.
inline bool lerp_weight_small(float w) { return std::abs(w) < 0.5f; }

// Calls f.template operator()<Decay, SmallW>() with the run-time flags as compile-time constants.
template <class F>
inline void adamw_dispatch(bool decay, bool small_w, F&& f) {
  if (decay) {
    small_w ? f.template operator()<true, true>() : f.template operator()<true, false>();
  } else {
    small_w ? f.template operator()<false, true>() : f.template operator()<false, false>();
  }
}

// The fp32 fast span (n elements from the given pointers), flags dispatched at run time.
inline void adamw_span_fast_f32(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                                bool small_w, const AdamWScalars& s) {
  adamw_dispatch(decay, small_w, [&]<bool D, bool W>() { adamw_span_fast<D, W>(p, g, m, v, n, s); });
}
inline void adamw_span_ref_f32(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                               bool small_w, const AdamWScalars& s) {
  adamw_dispatch(decay, small_w, [&]<bool D, bool W>() { adamw_span_ref<D, W>(p, g, m, v, n, s); });
}

}  // namespace mixtrain::optim_detail
