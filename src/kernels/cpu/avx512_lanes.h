// Small AVX-512 pieces shared by the kernels written in intrinsics (fp8_avx512.cpp,
// quantize_avx512.cpp, gelu_avx512.cpp): tail masks, 16 elements of a bf16 or f32 row as fp32 and
// back, and the largest of 32 unsigned 16-bit lanes. Compiled with per-function target attributes (the
// library targets baseline x86-64): only for code reached where the CPU has AVX-512 F, BW and VL.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "mixtrain/numeric/bf16.h"

#define MIXTRAIN_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace mixtrain::cpu::avx512 {

// Lanes [0, n) of 16 / of 32 (n may exceed the width).
MIXTRAIN_AVX512_BW inline __mmask16 lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
}
MIXTRAIN_AVX512_BW inline __mmask32 lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << n) - 1u);
}

// 16 elements (the masked-off lanes 0) as fp32: bf16 widened by its bits.
MIXTRAIN_AVX512_BW inline __m512 load16(const bf16* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
MIXTRAIN_AVX512_BW inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

// 16 fp32 values stored into lanes m of p: as themselves, or rounded to bf16 as bf16_from_f32 does
// (to nearest even by integer addition; NaN keeps its top half with the quiet bit set; no
// flushing of subnormals, unlike VCVTNEPS2BF16).
MIXTRAIN_AVX512_BW inline void store16(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
MIXTRAIN_AVX512_BW inline void store16(bf16* p, __mmask16 m, __m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, q)));
}

// The largest of 32 unsigned 16-bit lanes: halved twice to 8 lanes, then PHMINPOSUW (the smallest
// of 8 in one instruction) on their complements.
MIXTRAIN_AVX512_BW inline uint16_t reduce_max_epu16(__m512i v) {
  const __m256i a = _mm256_max_epu16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  const __m128i b = _mm_max_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  return uint16_t(~_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(b, _mm_set1_epi16(-1)))));
}

}  // namespace mixtrain::cpu::avx512
