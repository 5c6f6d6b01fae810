// quantize_rows' int8 row (kernels/quant_formula.h) in AVX-512 intrinsics, for bf16 and f32 rows
// read in place (quantize_cpu.cpp's loops stage a bf16 row in fp32 and pass over it three times:
// widen, amax, codes). The largest |x| as the unsigned maximum of the magnitudes' bits (32 bf16
// lanes at a time; a bit pattern at or above +inf's is inf or NaN: the row is not finite), the
// codes as x * mul converted with round-to-nearest-even (VCVTPS2DQ, as nearbyint) and narrowed
// with signed saturation to [-128, 127] (VPMOVSDB). Reached only where the CPU has AVX-512 F, BW
// and VL (simd_forms.h avx512_forms_run); the harness holds it to the reference bit for bit.
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

// GCC 12's AVX-512 intrinsics build their masked forms on _mm512_undefined_epi32(), which trips a
// false -Wmaybe-uninitialized (here -Wuninitialized, in _mm512_extracti64x4_epi64) once inlined
// (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/quantize_avx512.h"
#include "kernels/quant_formula.h"
#include "mixtrain/numeric/bf16.h"

#define MIXTRAIN_QUANT_AVX512 MIXTRAIN_AVX512_BW

namespace mixtrain::cpu {
namespace {

// The largest |x| of the row as fp32 bits (at or above 0x7f800000: inf or NaN somewhere).
MIXTRAIN_QUANT_AVX512 uint32_t q_amax_bits(const bf16* x, int64_t C) {
  __m512i m = _mm512_setzero_si512();
  for (int64_t c = 0; c < C; c += 32)
    m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_maskz_loadu_epi16(avx512::lanes32(C - c), x + c),
                                             _mm512_set1_epi16(0x7fff)));
  return uint32_t(avx512::reduce_max_epu16(m)) << 16;
}
MIXTRAIN_QUANT_AVX512 uint32_t q_amax_bits(const float* x, int64_t C) {
  __m512i m = _mm512_setzero_si512();
  for (int64_t c = 0; c < C; c += 16)
    m = _mm512_max_epu32(
        m, _mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(avx512::lanes16(C - c), x + c)),
                            _mm512_set1_epi32(0x7fffffff)));
  return _mm512_reduce_max_epu32(m);
}

template <typename In>
MIXTRAIN_QUANT_AVX512 float q_row_i8(const In* x, int64_t C, int8_t* q) {
  const uint32_t bits = q_amax_bits(x, C);
  const bool finite = bits < 0x7f800000u;
  const quant::RowScale s = quant::row_scale(finite ? std::bit_cast<float>(bits) : NAN, 127.f);
  if (!finite) {
    std::memset(q, 0, static_cast<size_t>(C));  // the code 0
    return s.scale;
  }
  const __m512 mul = _mm512_set1_ps(s.mul);
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = avx512::lanes16(C - c);
    // x * mul rounded to fp32 first (as the reference), then to the nearest integer, ties to even.
    const __m512i r = _mm512_cvt_roundps_epi32(_mm512_mul_ps(avx512::load16(x + c, m), mul),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_mask_storeu_epi8(q + c, m, _mm512_cvtsepi32_epi8(r));
  }
  return s.scale;
}

}  // namespace

float quantize_row_i8_avx512(const void* x, DType xt, int64_t C, int8_t* q) {
  return xt == DType::bf16 ? q_row_i8(static_cast<const bf16*>(x), C, q)
                           : q_row_i8(static_cast<const float*>(x), C, q);
}

}  // namespace mixtrain::cpu
