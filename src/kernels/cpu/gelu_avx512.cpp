// GELU (tanh form) forward and backward rows in AVX-512 intrinsics (gelu_avx512.h). The portable
// loops stage each bf16 chunk through fp32 buffers (widen, compute, round: three passes) and divide
// (VDIVPS: the slowest vector instruction they issue); on a model-207 Xeon GELU forward and
// backward were 8.6% of a gpt-mini bf16-mixed step (perf). Here each 16 elements are read once
// (bf16 widened by its bits, or f32), computed in registers and rounded once into the output:
//   e = exp(t), t = -2u clamped to [-87.3, 80]: n = round(t / ln2), r = t - n ln2 (two-part ln2),
//       Cephes' degree-6 polynomial for exp(r) (as cpu_rows.h exp_f32), 2^n applied by VSCALEFPS;
//   s = 1 / (1 + e): VRCP14PS and one Newton step (relative error below 2^-22: within the fp32
//       rounding of the portable form's division, far inside bf16's);
//   forward  o = x s;
//   backward o = g (s + 2 x s (e s) k (1 + 3 a x^2)) (backward_cpu.cpp's formula).
// t is clamped to [-87.3, 80] for exp (the reciprocal of an infinite 1 + e would be 0 and its
// Newton step NaN), and past the bounds e and s are set to their limits (terms()).
// Reached only where the CPU has AVX-512 F, BW and VL; the op harness holds both forms to the
// scalar reference (tests/kernels/ops: elementwise_test, backward_test).
#include "kernels/cpu/gelu_avx512.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

// GCC 12's AVX-512 intrinsics build their masked forms on _mm512_undefined_epi32(), which trips a
// false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/numeric/bf16.h"

namespace mixtrain::cpu {
namespace {

constexpr float kK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kA = 0.044715f;

// exp(t) for t in [-87.34, 80] (the caller clamps; NaN lanes give NaN). The loops are bound by
// the length of each element's dependency chain (the scheduler holds the waiting work of a few
// elements only), so the steps are arranged for latency: n by the round-to-integer constant
// (as exp_f32), the polynomial in Estrin's scheme (three levels instead of six).
MIXTRAIN_AVX512_BW inline __m512 exp_clamped(__m512 t) {
  const __m512 big = _mm512_set1_ps(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(t, _mm512_set1_ps(1.44269504088896341f), big), big);
  const __m512 r = _mm512_sub_ps(_mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), t),
                                 _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 r4 = _mm512_mul_ps(r2, r2);
  // Cephes' p(r) = c0 r^5 + c1 r^4 + c2 r^3 + c3 r^2 + c4 r + c5; exp(r) = 1 + r + r^2 p(r)
  const __m512 a = _mm512_fmadd_ps(_mm512_set1_ps(1.6666665459e-1f), r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 b = _mm512_fmadd_ps(_mm512_set1_ps(8.3334519073e-3f), r, _mm512_set1_ps(4.1665795894e-2f));
  const __m512 c = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  const __m512 p = _mm512_fmadd_ps(c, r4, _mm512_fmadd_ps(b, r2, a));
  return _mm512_scalef_ps(_mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.f))), n);
}

// 1 / d for finite d >= 1: VRCP14PS and one Newton step.
MIXTRAIN_AVX512_BW inline __m512 reciprocal(__m512 d) {
  const __m512 y = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(y, _mm512_fnmadd_ps(d, y, _mm512_set1_ps(2.f)));
}

struct Terms {
  __m512 e, s;  // exp(-2u) and 1 / (1 + e)
};
// Past the clamp's bounds the terms are set as their limits: e = 0 where -2u < -87.3 (exp
// underflows there), s = 0 where -2u > 80 (1 + e is past 5e34). So x = -inf gives x s = NaN forward
// and x = +-inf gives 2 x s (e s) = NaN backward, as in the reference, and the far negative tail is
// -0 forward, as x / (1 + inf) is.
MIXTRAIN_AVX512_BW inline Terms terms(__m512 v) {
  // t = -2u = v (-2k - 2k a v^2)
  const __m512 t = _mm512_mul_ps(
      v, _mm512_fmadd_ps(_mm512_mul_ps(v, v), _mm512_set1_ps(-2.f * kK * kA), _mm512_set1_ps(-2.f * kK)));
  const __m512 lo = _mm512_set1_ps(-87.3365478515625f), hi = _mm512_set1_ps(80.f);
  const __mmask16 under = _mm512_cmp_ps_mask(t, lo, _CMP_LT_OQ), over = _mm512_cmp_ps_mask(t, hi, _CMP_GT_OQ);
  // min/max return their second operand when the first is NaN: a NaN t stays NaN.
  const __m512 e = exp_clamped(_mm512_max_ps(lo, _mm512_min_ps(hi, t)));
  const __m512 s = reciprocal(_mm512_add_ps(_mm512_set1_ps(1.f), e));
  return {_mm512_maskz_mov_ps(__mmask16(~under), e), _mm512_maskz_mov_ps(__mmask16(~over), s)};
}

template <typename In, typename Out>
MIXTRAIN_AVX512_BW inline void gelu16(const In* x, Out* o, __mmask16 m) {
  const __m512 v = avx512::load16(x, m);
  avx512::store16(o, m, _mm512_mul_ps(v, terms(v).s));
}

template <typename In, typename Out>
MIXTRAIN_AVX512_BW void gelu_row(const In* x, Out* o, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // two independent chains per iteration
    gelu16(x + i, o + i, __mmask16(0xffff));
    gelu16(x + i + 16, o + i + 16, __mmask16(0xffff));
  }
  for (; i < n; i += 16) gelu16(x + i, o + i, avx512::lanes16(n - i));
}

template <typename In, typename G, typename Out>
MIXTRAIN_AVX512_BW void gelu_backward_row(const In* x, const G* g, Out* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = avx512::lanes16(n - i);
    const __m512 v = avx512::load16(x + i, m);
    const __m512 d = avx512::load16(g + i, m);
    const Terms tm = terms(v);
    // 2 x s (e s) k (1 + 3 a x^2), left to right as the portable form
    __m512 w = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.f), v), tm.s);
    w = _mm512_mul_ps(w, _mm512_mul_ps(tm.e, tm.s));
    w = _mm512_mul_ps(w, _mm512_set1_ps(kK));
    w = _mm512_mul_ps(w, _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(3.f * kA), v), v, _mm512_set1_ps(1.f)));
    avx512::store16(o + i, m, _mm512_mul_ps(d, _mm512_add_ps(tm.s, w)));
  }
}

// ---- GELU, erf form (BERT's "gelu"): 0.5 x (1 + erf(x / sqrt(2))) ----------------------------------
// erf as cpu_rows.h erf_f32 (the same two fitted polynomials, kErfP and kErfcG), with a = |z|:
//   a < 1:  erf = a + a P(a^2);   a >= 1: erf = 1 - exp(-a^2) G(1 / min(a, 4))
// both evaluated in Estrin's scheme, 1 / a as VRCP14PS and a Newton step, and exp(-a^2) shared with
// the backward's density term exp(-x^2 / 2) (the same value: a^2 = x^2 / 2). Past a^2 = 87.3 that
// exponential is taken as 0 (it underflows), so +-inf gives NaN backward as the reference's
// x * 0 does; erf is 1 there either way (exp(-16) G(1/4) is below half an fp32 ulp of 1).
struct ErfTerms {
  __m512 erf, e;  // erf(z) and exp(-z^2)
};
MIXTRAIN_AVX512_BW inline ErfTerms erf_terms(__m512 z) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 a = _mm512_abs_ps(z);
  const __m512 s = _mm512_mul_ps(a, a);
  // small: a + a P(s), P of degree 6
  const __m512 s2 = _mm512_mul_ps(s, s), s4 = _mm512_mul_ps(s2, s2);
  const __m512 p01 = _mm512_fmadd_ps(_mm512_set1_ps(kErfP[1]), s, _mm512_set1_ps(kErfP[0]));
  const __m512 p23 = _mm512_fmadd_ps(_mm512_set1_ps(kErfP[3]), s, _mm512_set1_ps(kErfP[2]));
  const __m512 p45 = _mm512_fmadd_ps(_mm512_set1_ps(kErfP[5]), s, _mm512_set1_ps(kErfP[4]));
  const __m512 p03 = _mm512_fmadd_ps(p23, s2, p01);
  const __m512 p46 = _mm512_fmadd_ps(_mm512_set1_ps(kErfP[6]), s2, p45);
  const __m512 small = _mm512_fmadd_ps(a, _mm512_fmadd_ps(p46, s4, p03), a);
  // large: 1 - exp(-s) G(u), u = 1 / clamp(a, 1, 4), G of degree 9
  const __m512 u = reciprocal(_mm512_min_ps(_mm512_max_ps(a, one), _mm512_set1_ps(4.f)));
  const __m512 u2 = _mm512_mul_ps(u, u), u4 = _mm512_mul_ps(u2, u2), u8 = _mm512_mul_ps(u4, u4);
  const __m512 g01 = _mm512_fmadd_ps(_mm512_set1_ps(kErfcG[1]), u, _mm512_set1_ps(kErfcG[0]));
  const __m512 g23 = _mm512_fmadd_ps(_mm512_set1_ps(kErfcG[3]), u, _mm512_set1_ps(kErfcG[2]));
  const __m512 g45 = _mm512_fmadd_ps(_mm512_set1_ps(kErfcG[5]), u, _mm512_set1_ps(kErfcG[4]));
  const __m512 g67 = _mm512_fmadd_ps(_mm512_set1_ps(kErfcG[7]), u, _mm512_set1_ps(kErfcG[6]));
  const __m512 g89 = _mm512_fmadd_ps(_mm512_set1_ps(kErfcG[9]), u, _mm512_set1_ps(kErfcG[8]));
  const __m512 g07 = _mm512_fmadd_ps(_mm512_fmadd_ps(g67, u2, g45), u4, _mm512_fmadd_ps(g23, u2, g01));
  const __m512 g = _mm512_fmadd_ps(g89, u8, g07);
  const __m512 lo = _mm512_set1_ps(87.3365478515625f);
  const __mmask16 under = _mm512_cmp_ps_mask(s, lo, _CMP_GT_OQ);
  const __m512 e = _mm512_maskz_mov_ps(__mmask16(~under),
                                       exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_min_ps(s, lo))));
  const __m512 large = _mm512_fnmadd_ps(e, g, one);
  const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, one, _CMP_LT_OQ), large, small);
  // the sign of z put back (a NaN z gives a NaN r: its sign does not matter)
  const __m512 signed_r = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(r),
                      _mm512_and_si512(_mm512_castps_si512(z), _mm512_set1_epi32(int32_t(0x80000000u)))));
  return {signed_r, e};
}

constexpr float kSqrtHalf = 0.70710678118654752f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)

template <typename In, typename Out>
MIXTRAIN_AVX512_BW inline void gelu_erf16(const In* x, Out* o, __mmask16 m) {
  const __m512 v = avx512::load16(x, m);
  const ErfTerms t = erf_terms(_mm512_mul_ps(v, _mm512_set1_ps(kSqrtHalf)));
  // 0.5 x (1 + erf), left to right as the portable form
  avx512::store16(
      o, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v), _mm512_add_ps(_mm512_set1_ps(1.f), t.erf)));
}

template <typename In, typename Out>
MIXTRAIN_AVX512_BW void gelu_erf_row(const In* x, Out* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) gelu_erf16(x + i, o + i, avx512::lanes16(n - i));
}

template <typename In, typename G, typename Out>
MIXTRAIN_AVX512_BW void gelu_erf_backward_row(const In* x, const G* g, Out* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = avx512::lanes16(n - i);
    const __m512 v = avx512::load16(x + i, m);
    const __m512 d = avx512::load16(g + i, m);
    const ErfTerms t = erf_terms(_mm512_mul_ps(v, _mm512_set1_ps(kSqrtHalf)));
    // g (cdf + x / sqrt(2 pi) exp(-x^2 / 2)), cdf = 0.5 (1 + erf)
    const __m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(_mm512_set1_ps(1.f), t.erf));
    const __m512 pdf = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(kInvSqrt2Pi)), t.e);
    avx512::store16(o + i, m, _mm512_mul_ps(d, _mm512_add_ps(cdf, pdf)));
  }
}

// Calls f with x (and the other pointers) at their element types (bf16 or f32).
template <typename F>
void with_type(const void* p, DType t, F f) {
  if (t == DType::bf16)
    f(static_cast<const bf16*>(p));
  else
    f(static_cast<const float*>(p));
}
template <typename F>
void with_out_type(void* p, DType t, F f) {
  if (t == DType::bf16)
    f(static_cast<bf16*>(p));
  else
    f(static_cast<float*>(p));
}

}  // namespace

void gelu_row_avx512(const void* x, DType xt, void* o, DType ot, int64_t n) {
  with_type(x, xt, [&](auto* xp) { with_out_type(o, ot, [&](auto* op) { gelu_row(xp, op, n); }); });
}

void gelu_backward_row_avx512(const void* x, DType xt, const void* g, DType gt, void* o, DType ot,
                              int64_t n) {
  with_type(x, xt, [&](auto* xp) {
    with_type(g, gt,
              [&](auto* gp) { with_out_type(o, ot, [&](auto* op) { gelu_backward_row(xp, gp, op, n); }); });
  });
}

void gelu_erf_row_avx512(const void* x, DType xt, void* o, DType ot, int64_t n) {
  with_type(x, xt, [&](auto* xp) { with_out_type(o, ot, [&](auto* op) { gelu_erf_row(xp, op, n); }); });
}

void gelu_erf_backward_row_avx512(const void* x, DType xt, const void* g, DType gt, void* o, DType ot,
                                  int64_t n) {
  with_type(x, xt, [&](auto* xp) {
    with_type(g, gt, [&](auto* gp) {
      with_out_type(o, ot, [&](auto* op) { gelu_erf_backward_row(xp, gp, op, n); });
    });
  });
}

}  // namespace mixtrain::cpu
