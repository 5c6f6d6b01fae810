// Small AVX-512 pieces shared by the kernels written in intrinsics (fp8_avx512.cpp,
// quantize_avx512.cpp): tail masks, 16 elements of a bf16 or f32 row as fp32, and the largest of
// 32 unsigned 16-bit lanes. Compiled with per-function target attributes (the library targets
// baseline x86-64): only for code reached where the CPU has AVX-512 F, BW and VL.
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

// The largest of 32 unsigned 16-bit lanes: halved twice to 8 lanes, then PHMINPOSUW (the smallest
// of 8 in one instruction) on their complements.
MIXTRAIN_AVX512_BW inline uint16_t reduce_max_epu16(__m512i v) {
  const __m256i a = _mm256_max_epu16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  const __m128i b = _mm_max_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  return uint16_t(~_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(b, _mm_set1_epi16(-1)))));
}

}  // namespace mixtrain::cpu::avx512
