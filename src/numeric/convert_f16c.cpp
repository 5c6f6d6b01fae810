// F16C bulk fp32 <-> fp16 conversions (8 lanes, VCVTPS2PH / VCVTPH2PS), for CPUs with AVX2 but
// no AVX-512. Per-function target attributes; reached only through run-time dispatch. The tail
// goes through a zeroed stack buffer so every element uses the same instruction.
#include <immintrin.h>

#include <cstring>

#include "mixtrain/numeric/convert.h"

#define MIXTRAIN_TARGET_F16C __attribute__((target("f16c,avx2,fma")))

namespace mixtrain {

// Rounding comes from the immediate (nearest even), not from MXCSR.RC.
MIXTRAIN_TARGET_F16C void convert_f32_to_fp16_f16c(const float* src, fp16* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {
    alignas(32) float in[8] = {};
    alignas(16) uint16_t out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out),
                    _mm256_cvtps_ph(_mm256_load_ps(in), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(dst + i, out, (n - i) * sizeof(fp16));
  }
}

MIXTRAIN_TARGET_F16C void convert_fp16_to_f32_f16c(const fp16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  if (i < n) {
    alignas(16) uint16_t in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(fp16));
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(dst + i, out, (n - i) * sizeof(float));
  }
}

}  // namespace mixtrain
