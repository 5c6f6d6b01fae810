// The softmax rows in AVX-512 intrinsics (softmax_avx512.h). GCC vectorises cpu_rows.h exp_f32
// from its branch-free C++, but turns the clamps and selects into masked, zeroing forms of every
// step (about 45 instructions per 16 elements), and the masked scores' maximum ends in a scalar
// loop of compares that mispredicts on random scores (a row of 128 has only 8 vectors, so that
// tail was a third of the row's work). Here the exponential's steps are 20: the clamp by
// VMINPS/VMAXPS, n by the round-to-integer constant, the two-part ln2, the same degree-6 Horner
// polynomial (the same fused multiply-adds, so the same values), 2^n applied by VSCALEFPS (exact
// where 2^n p is normal or subnormal, as exp_f32's exponent-bit product is), and the overflow,
// underflow and NaN cases as exp_f32 has them (inf above ln(FLT_MAX), 0 below ln(FLT_MIN), NaN
// kept), and the maximum's lanes are reduced by VMAXPS shuffles after one NaN test. On a model-207
// Xeon the masked softmax was 18% of an int8 MiniLM evaluation (perf), most of it these two loops.
// Reached only where the CPU has AVX-512 F, BW and VL. tests/kernels/ops/softmax_forms_test.cpp
// holds the exponentials, the sums and the masked softmax to the portable form's bits; the op
// harness holds the ops to their scalar references.
#include "kernels/cpu/softmax_avx512.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

// GCC 12's AVX-512 intrinsics build their masked forms on _mm512_undefined_epi32(), which trips a
// false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/cpu_rows.h"

namespace mixtrain::cpu {
namespace {

constexpr int kLanes = kSumLanes;  // the blocked sums' lanes and sub-total run (cpu_rows.h)
constexpr int64_t kSub = kSumSub;

// exp_f32 of 16 lanes.
MIXTRAIN_AVX512_BW inline __m512 exp16(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.72283935546875f), lo = _mm512_set1_ps(-87.3365478515625f);
  // min/max return their second operand when the first is NaN: a NaN x stays NaN.
  const __m512 xc = _mm512_max_ps(lo, _mm512_min_ps(hi, x));
  const __m512 big = _mm512_set1_ps(12582912.f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big), big);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.f));
  __m512 y = _mm512_scalef_ps(p, n);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y);  // below lo: 0
}

}  // namespace

MIXTRAIN_AVX512_BW float exp_sub_block_sum_avx512(const float* x, float m, float* out, int64_t n) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 total = _mm512_setzero_ps();
  const int64_t n16 = n - n % kLanes;
  for (int64_t s0 = 0; s0 < n16; s0 += kSub) {
    const int64_t s1 = std::min(n16, s0 + kSub);
    __m512 sub = _mm512_setzero_ps();
    for (int64_t i = s0; i < s1; i += kLanes) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
      _mm512_storeu_ps(out + i, e);
      sub = _mm512_add_ps(sub, e);
    }
    total = _mm512_add_ps(total, sub);
  }
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, total);
  if (n > n16) {  // the tail: element n16 + j into lane j
    const __mmask16 t = avx512::lanes16(n - n16);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + n16), mv));
    _mm512_mask_storeu_ps(out + n16, t, e);
    alignas(64) float tail[kLanes];
    _mm512_store_ps(tail, e);
    for (int64_t j = 0; j < n - n16; ++j) lanes[j] += tail[j];
  }
  return combine_lanes(lanes);
}

MIXTRAIN_AVX512_BW void exp_sub_avx512(const float* x, float m, float* out, int64_t n) {
  const __m512 mv = _mm512_set1_ps(m);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 t = avx512::lanes16(n - i);
    _mm512_mask_storeu_ps(out + i, t, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + i), mv)));
  }
}

MIXTRAIN_AVX512_BW float masked_scale_max_avx512(const float* p, const int32_t* m, float scale, float* s,
                                                 int64_t n) {
  const __m512 sc = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 t = avx512::lanes16(n - i);
    const __m512i mi = _mm512_maskz_loadu_epi32(t, m + i);
    const __mmask16 keep = _mm512_test_epi32_mask(mi, mi);
    const __m512 v = _mm512_mask_mul_ps(neg_inf, keep, sc, _mm512_maskz_loadu_ps(t, p + i));
    _mm512_mask_storeu_ps(s + i, t, v);
    // v where v > mx or v is NaN (a lane that met a NaN keeps it); the tail's unused lanes are -inf
    const __mmask16 take = _mm512_cmp_ps_mask(v, mx, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mx = _mm512_mask_mov_ps(mx, take, v);
  }
  // The lanes' maximum without a branch per lane (the portable form's scalar loop of compares
  // mispredicts on random scores): NaN when a lane holds one, else the largest.
  if (_mm512_cmp_ps_mask(mx, mx, _CMP_UNORD_Q)) return NAN;
  return _mm512_reduce_max_ps(mx);
}

MIXTRAIN_AVX512_BW float block_max_avx512(const float* p, int64_t n) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 t = avx512::lanes16(n - i);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), t, p + i);
    mx = _mm512_mask_mov_ps(
        mx, _mm512_cmp_ps_mask(v, mx, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
  }
  if (const __mmask16 nan =
          _mm512_cmp_ps_mask(mx, mx, _CMP_UNORD_Q)) {  // the first NaN lane's, as the loop's
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, mx);
    return lanes[__builtin_ctz(nan)];
  }
  return _mm512_reduce_max_ps(mx);
}

}  // namespace mixtrain::cpu
