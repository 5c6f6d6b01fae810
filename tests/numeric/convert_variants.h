// The SIMD variants of each 16-bit bulk conversion, with the CPU features each needs, so the
// fast and the exhaustive tests run every variant the machine supports and name the others.
#pragma once
#include <vector>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain::test {

template <class Src, class Dst>
struct ConvertVariant {
  const char* name;
  void (*fn)(const Src*, Dst*, size_t);
  bool supported;
};

inline std::vector<ConvertVariant<float, bf16>> f32_to_bf16_variants() {
  const CpuFeatures& c = cpu_features();
  return {
      {"avx512bf16", convert_f32_to_bf16_avx512bf16, c.avx512f && c.avx512bw && c.avx512vl && c.avx512_bf16},
      {"avx512", convert_f32_to_bf16_avx512, c.avx512f}};
}
inline std::vector<ConvertVariant<bf16, float>> bf16_to_f32_variants() {
  return {{"avx512", convert_bf16_to_f32_avx512, cpu_features().avx512f}};
}
inline std::vector<ConvertVariant<float, fp16>> f32_to_fp16_variants() {
  const CpuFeatures& c = cpu_features();
  return {{"f16c", convert_f32_to_fp16_f16c, c.f16c && c.avx2 && c.fma},
          {"avx512", convert_f32_to_fp16_avx512, c.avx512f}};
}
inline std::vector<ConvertVariant<fp16, float>> fp16_to_f32_variants() {
  const CpuFeatures& c = cpu_features();
  return {{"f16c", convert_fp16_to_f32_f16c, c.f16c && c.avx2 && c.fma},
          {"avx512", convert_fp16_to_f32_avx512, c.avx512f}};
}

inline std::vector<ConvertVariant<float, fp8_e4m3>> f32_to_e4m3_variants() {
  return {{"avx512", convert_f32_to_fp8_e4m3_avx512, cpu_features().avx512f}};
}
inline std::vector<ConvertVariant<float, fp8_e4m3>> f32_to_e4m3_saturate_variants() {
  return {{"avx512", convert_f32_to_fp8_e4m3_saturate_avx512, cpu_features().avx512f}};
}

}  // namespace mixtrain::test
