// Exhaustive check (label "slow"): every SIMD variant this CPU supports against the scalar
// oracle over ALL 2^32 fp32 inputs (fp32 -> bf16, fp32 -> fp16, fp32 -> E4M3 in both overflow
// modes) and all 65,536 patterns of the widening direction, compared byte for byte. Variants the
// CPU lacks are named, not silently passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "convert_variants.h"

namespace mixtrain {
namespace {

// Splits [0, 2^32) into chunks across OpenMP threads; each chunk computes the scalar result once
// and compares every supported variant with it. Returns per variant the lowest mismatching input
// (or UINT64_MAX when none).
template <class Dst>
void check_all_f32_inputs(const std::vector<test::ConvertVariant<float, Dst>>& all,
                          void (*scalar)(const float*, Dst*, size_t), const char* direction) {
  std::vector<test::ConvertVariant<float, Dst>> variants;
  for (const auto& v : all) {
    if (v.supported)
      variants.push_back(v);
    else
      std::printf("%s %s: NOT TESTED, this CPU lacks the feature\n", direction, v.name);
  }
  if (variants.empty()) GTEST_SKIP() << "no SIMD variant of " << direction << " on this CPU";
  constexpr size_t kChunk = size_t{1} << 16;
  constexpr int64_t kChunks = int64_t((uint64_t{1} << 32) / kChunk);
  std::vector<uint64_t> first_bad(variants.size(), UINT64_MAX);
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
  {
    std::vector<float> in(kChunk);
    std::vector<Dst> want(kChunk), got(kChunk);
#pragma omp for schedule(dynamic, 64)
    for (int64_t c = 0; c < kChunks; ++c) {
      const uint32_t base = uint32_t(uint64_t(c) * kChunk);
      for (size_t i = 0; i < kChunk; ++i) in[i] = std::bit_cast<float>(base + uint32_t(i));
      const float* f = in.data();
      scalar(f, want.data(), kChunk);
      for (size_t v = 0; v < variants.size(); ++v) {
        variants[v].fn(f, got.data(), kChunk);
        if (std::memcmp(want.data(), got.data(), kChunk * sizeof(Dst)) != 0) {
          size_t i = 0;
          while (std::memcmp(&want[i], &got[i], sizeof(Dst)) == 0) ++i;
#pragma omp critical
          first_bad[v] = std::min<uint64_t>(first_bad[v], base + i);
        }
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t v = 0; v < variants.size(); ++v) {
    if (first_bad[v] == UINT64_MAX) {
      std::printf("%s %s: all 2^32 inputs match scalar\n", direction, variants[v].name);
      continue;
    }
    const uint32_t x = uint32_t(first_bad[v]);
    Dst want, got;
    float f;
    std::memcpy(&f, &x, 4);
    scalar(&f, &want, 1);
    variants[v].fn(&f, &got, 1);
    ADD_FAILURE() << direction << " " << variants[v].name << ": first mismatch at input 0x" << std::hex << x
                  << ": scalar 0x" << unsigned(want.bits()) << ", simd 0x" << unsigned(got.bits());
  }
  std::printf("%s: %zu variant(s) x 2^32 inputs in %.1f s\n", direction, variants.size(), secs);
}

template <class Src>
void check_all_16bit_inputs(const std::vector<test::ConvertVariant<Src, float>>& all,
                            void (*scalar)(const Src*, float*, size_t), const char* direction) {
  std::vector<Src> in(0x10000);
  for (uint32_t b = 0; b < 0x10000; ++b) in[b] = Src::from_bits(uint16_t(b));
  std::vector<float> want(0x10000), got(0x10000);
  scalar(in.data(), want.data(), in.size());
  bool any = false;
  for (const auto& v : all) {
    if (!v.supported) {
      std::printf("%s %s: NOT TESTED, this CPU lacks the feature\n", direction, v.name);
      continue;
    }
    any = true;
    v.fn(in.data(), got.data(), in.size());
    for (uint32_t b = 0; b < 0x10000; ++b) {
      ASSERT_EQ(std::memcmp(&want[b], &got[b], 4), 0)
          << direction << " " << v.name << ": first mismatch at pattern 0x" << std::hex << b;
    }
  }
  if (!any) GTEST_SKIP() << "no SIMD variant of " << direction << " on this CPU";
}

TEST(ConvertExhaustive, F32ToBf16AllInputs) {
  check_all_f32_inputs<bf16>(test::f32_to_bf16_variants(), convert_f32_to_bf16_scalar, "f32->bf16");
}
TEST(ConvertExhaustive, F32ToFp16AllInputs) {
  check_all_f32_inputs<fp16>(test::f32_to_fp16_variants(), convert_f32_to_fp16_scalar, "f32->fp16");
}
TEST(ConvertExhaustive, F32ToE4m3AllInputs) {
  check_all_f32_inputs<fp8_e4m3>(test::f32_to_e4m3_variants(), convert_f32_to_fp8_e4m3_scalar, "f32->e4m3");
  check_all_f32_inputs<fp8_e4m3>(test::f32_to_e4m3_saturate_variants(),
                                 convert_f32_to_fp8_e4m3_saturate_scalar, "f32->e4m3 saturating");
}
TEST(ConvertExhaustive, Bf16ToF32AllPatterns) {
  check_all_16bit_inputs<bf16>(test::bf16_to_f32_variants(), convert_bf16_to_f32_scalar, "bf16->f32");
}
TEST(ConvertExhaustive, Fp16ToF32AllPatterns) {
  check_all_16bit_inputs<fp16>(test::fp16_to_f32_variants(), convert_fp16_to_f32_scalar, "fp16->f32");
}

}  // namespace
}  // namespace mixtrain
