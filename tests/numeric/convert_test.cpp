// Bulk conversions (dispatched and every supported SIMD variant) against the scalar oracle on
// odd lengths, misaligned pointers, random and special inputs, under a hostile MXCSR, and with
// the force-reference switch. The all-2^32 comparison lives in convert_slow_test.cpp.
#include "mixtrain/numeric/convert.h"

#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "convert_variants.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace {

const size_t kLengths[] = {0, 1, 15, 16, 17, 31, 33, 1000 + 7, (size_t{1} << 17) + 5};

// Random bits mixed with the special values every conversion must get right.
std::vector<uint32_t> input_bits(size_t n, uint32_t seed) {
  static const uint32_t specials[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00400000, 0x7f800000,
                                      0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000, 0x7fffffff,
                                      0x7f7fffff, 0x3f808000, 0x3f818000, 0x33000000, 0x33000001, 0x387fe000,
                                      0x477fefff, 0x477ff000, 0x3f801000};
  std::mt19937 rng(seed);
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    v[i] = (r & 7) == 0 ? specials[(r >> 3) % std::size(specials)] : rng();
  }
  return v;
}

// Runs `fast` and `ref` on the same data at each length, aligned and offset by one element, and
// compares the output bytes (plus a guard element past the end that must stay untouched).
template <class Src, class Dst, class Fast, class Ref>
void compare(const std::vector<Src>& pool, Fast fast, Ref ref, const std::string& what) {
  for (size_t n : kLengths) {
    for (size_t off : {size_t{0}, size_t{1}}) {
      ASSERT_LE(n + off + 1, pool.size());
      const Src* src = pool.data() + off;
      std::vector<Dst> want(n + off + 1), got(n + off + 1);
      std::memset(want.data(), 0xa5, want.size() * sizeof(Dst));
      std::memset(got.data(), 0xa5, got.size() * sizeof(Dst));
      ref(src, want.data() + off, n);
      fast(src, got.data() + off, n);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(Dst)), 0)
            << what << ": n=" << n << " offset=" << off << " first mismatch at " << i;
      }
    }
  }
}

template <class T>
std::vector<T> pool_of(size_t n, uint32_t seed) {
  const std::vector<uint32_t> bits = input_bits(n, seed);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 4)
      v[i] = std::bit_cast<T>(bits[i]);
    else if constexpr (sizeof(T) == 2)
      v[i] = T::from_bits(uint16_t(bits[i] ^ (bits[i] >> 16)));
    else
      v[i] = T::from_bits(uint8_t(bits[i] ^ (bits[i] >> 24)));
  }
  return v;
}

const size_t kPool = (size_t{1} << 17) + 16;

TEST(Convert, F32ToBf16) {
  const auto src = pool_of<float>(kPool, 1);
  compare<float, bf16>(src, convert_f32_to_bf16, convert_f32_to_bf16_scalar, "dispatched");
  for (const auto& v : test::f32_to_bf16_variants()) {
    if (v.supported)
      compare<float, bf16>(src, v.fn, convert_f32_to_bf16_scalar, v.name);
    else
      std::printf("f32->bf16 %s: not tested, CPU lacks it\n", v.name);
  }
}

TEST(Convert, Bf16ToF32) {
  const auto src = pool_of<bf16>(kPool, 2);
  compare<bf16, float>(src, convert_bf16_to_f32, convert_bf16_to_f32_scalar, "dispatched");
  for (const auto& v : test::bf16_to_f32_variants()) {
    if (v.supported)
      compare<bf16, float>(src, v.fn, convert_bf16_to_f32_scalar, v.name);
    else
      std::printf("bf16->f32 %s: not tested, CPU lacks it\n", v.name);
  }
}

TEST(Convert, F32ToFp16) {
  const auto src = pool_of<float>(kPool, 3);
  compare<float, fp16>(src, convert_f32_to_fp16, convert_f32_to_fp16_scalar, "dispatched");
  for (const auto& v : test::f32_to_fp16_variants()) {
    if (v.supported)
      compare<float, fp16>(src, v.fn, convert_f32_to_fp16_scalar, v.name);
    else
      std::printf("f32->fp16 %s: not tested, CPU lacks it\n", v.name);
  }
}

TEST(Convert, Fp16ToF32) {
  const auto src = pool_of<fp16>(kPool, 4);
  compare<fp16, float>(src, convert_fp16_to_f32, convert_fp16_to_f32_scalar, "dispatched");
  for (const auto& v : test::fp16_to_f32_variants()) {
    if (v.supported)
      compare<fp16, float>(src, v.fn, convert_fp16_to_f32_scalar, v.name);
    else
      std::printf("fp16->f32 %s: not tested, CPU lacks it\n", v.name);
  }
}

TEST(Convert, Fp8BothDirections) {
  const auto src = pool_of<float>(kPool, 5);
  for (Fp8Overflow o : {Fp8Overflow::nan, Fp8Overflow::saturate}) {
    compare<float, fp8_e4m3>(
        src, [o](const float* s, fp8_e4m3* d, size_t n) { convert_f32_to_fp8_e4m3(s, d, n, o); },
        [o](const float* s, fp8_e4m3* d, size_t n) {
          for (size_t i = 0; i < n; ++i) d[i] = fp8_e4m3_from_f32(s[i], o);
        },
        "f32->e4m3");
    for (const auto& v :
         o == Fp8Overflow::nan ? test::f32_to_e4m3_variants() : test::f32_to_e4m3_saturate_variants()) {
      if (v.supported)
        compare<float, fp8_e4m3>(
            src, v.fn,
            [o](const float* s, fp8_e4m3* d, size_t n) {
              for (size_t i = 0; i < n; ++i) d[i] = fp8_e4m3_from_f32(s[i], o);
            },
            v.name);
      else
        std::printf("f32->e4m3 %s: not tested, CPU lacks it\n", v.name);
    }
    compare<float, fp8_e5m2>(
        src, [o](const float* s, fp8_e5m2* d, size_t n) { convert_f32_to_fp8_e5m2(s, d, n, o); },
        [o](const float* s, fp8_e5m2* d, size_t n) {
          for (size_t i = 0; i < n; ++i) d[i] = fp8_e5m2_from_f32(s[i], o);
        },
        "f32->e5m2");
  }
  compare<fp8_e4m3, float>(
      pool_of<fp8_e4m3>(kPool, 6), convert_fp8_e4m3_to_f32,
      [](const fp8_e4m3* s, float* d, size_t n) {
        for (size_t i = 0; i < n; ++i) d[i] = f32_from_fp8_e4m3(s[i]);
      },
      "e4m3->f32");
  compare<fp8_e5m2, float>(
      pool_of<fp8_e5m2>(kPool, 7), convert_fp8_e5m2_to_f32,
      [](const fp8_e5m2* s, float* d, size_t n) {
        for (size_t i = 0; i < n; ++i) d[i] = f32_from_fp8_e5m2(s[i]);
      },
      "e5m2->f32");
}

// Frameworks often turn on FTZ/DAZ and may change the rounding mode; none of that may change
// the bits (VCVTPS2PH takes its rounding from the immediate; the rest is integer code).
TEST(Convert, IgnoresMxcsr) {
  const unsigned saved = _mm_getcsr();
  // Inputs around the fp16 and bf16 subnormal ranges, where FTZ/DAZ would bite.
  std::vector<float> src;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    src.push_back(f32_from_fp16(fp16::from_bits(uint16_t(b))));
    src.push_back(std::bit_cast<float>(b * 0x81u));  // fp32 subnormals
    src.push_back(std::bit_cast<float>(0x33000000u + b * 0x50u));
  }
  const size_t n = src.size();
  std::vector<bf16> b_want(n), b_got(n);
  std::vector<fp16> h_want(n), h_got(n);
  std::vector<float> f_want(n), f_got(n);
  convert_f32_to_bf16_scalar(src.data(), b_want.data(), n);
  convert_f32_to_fp16_scalar(src.data(), h_want.data(), n);
  convert_fp16_to_f32_scalar(h_want.data(), f_want.data(), n);
  // Variants are called directly: MXCSR is per thread, and the dispatched calls may run chunks
  // on OpenMP workers that never saw this setting.
  for (unsigned mode : {_MM_ROUND_DOWN, _MM_ROUND_UP, _MM_ROUND_TOWARD_ZERO}) {
    for (const auto& v : test::f32_to_bf16_variants()) {
      if (!v.supported) continue;
      _mm_setcsr((saved & ~0xe040u) | 0x8040u | mode);  // FTZ | DAZ | rounding mode
      v.fn(src.data(), b_got.data(), n);
      _mm_setcsr(saved);
      EXPECT_EQ(std::memcmp(b_want.data(), b_got.data(), n * 2), 0) << v.name << " " << mode;
    }
    for (const auto& v : test::f32_to_fp16_variants()) {
      if (!v.supported) continue;
      _mm_setcsr((saved & ~0xe040u) | 0x8040u | mode);
      v.fn(src.data(), h_got.data(), n);
      _mm_setcsr(saved);
      EXPECT_EQ(std::memcmp(h_want.data(), h_got.data(), n * 2), 0) << v.name << " " << mode;
    }
    for (const auto& v : test::fp16_to_f32_variants()) {
      if (!v.supported) continue;
      _mm_setcsr((saved & ~0xe040u) | 0x8040u | mode);
      v.fn(h_want.data(), f_got.data(), n);
      _mm_setcsr(saved);
      EXPECT_EQ(std::memcmp(f_want.data(), f_got.data(), n * 4), 0) << v.name << " " << mode;
    }
  }
}

TEST(Convert, ForceReferenceIsHonoured) {
  const bool saved = force_reference();
  // Nothing in this binary sets it before this test, so it still reflects the environment.
  const char* env = std::getenv("MIXTRAIN_FORCE_REFERENCE");
  EXPECT_EQ(saved, env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0);
  set_force_reference(true);
  EXPECT_STREQ(f32_to_bf16_impl_name(), "scalar");
  EXPECT_STREQ(bf16_to_f32_impl_name(), "scalar");
  EXPECT_STREQ(f32_to_fp16_impl_name(), "scalar");
  EXPECT_STREQ(fp16_to_f32_impl_name(), "scalar");
  EXPECT_STREQ(f32_to_fp8_e4m3_impl_name(), "scalar");
  const auto src = pool_of<float>(kPool, 9);
  compare<float, bf16>(src, convert_f32_to_bf16, convert_f32_to_bf16_scalar, "forced");
  set_force_reference(false);
  const CpuFeatures& c = cpu_features();
  const std::string want_bf16 = c.avx512f && c.avx512bw && c.avx512vl && c.avx512_bf16 ? "avx512bf16"
                                : c.avx512f                                            ? "avx512"
                                                                                       : "scalar";
  EXPECT_EQ(f32_to_bf16_impl_name(), want_bf16);
  EXPECT_STREQ(f32_to_fp8_e4m3_impl_name(), c.avx512f ? "avx512" : "scalar");
  std::printf("dispatch: f32->bf16 %s, bf16->f32 %s, f32->fp16 %s, fp16->f32 %s\n", f32_to_bf16_impl_name(),
              bf16_to_f32_impl_name(), f32_to_fp16_impl_name(), fp16_to_f32_impl_name());
  set_force_reference(saved);
}

TEST(CpuFeatures, ConsistentImplications) {
  const CpuFeatures& c = cpu_features();
  EXPECT_EQ(&c, &cpu_features());
  if (c.avx512bw || c.avx512vl || c.avx512_bf16 || c.avx512_fp16) {
    EXPECT_TRUE(c.avx512f);
  }
  if (c.amx_bf16) {
    EXPECT_TRUE(c.amx_tile);
  }
  std::printf("avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d bf16=%d fp16=%d amx_tile=%d amx_bf16=%d\n",
              c.avx2, c.fma, c.f16c, c.avx512f, c.avx512bw, c.avx512vl, c.avx512_bf16, c.avx512_fp16,
              c.amx_tile, c.amx_bf16);
}

}  // namespace
}  // namespace mixtrain
