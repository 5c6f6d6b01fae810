// Stochastic rounding: deterministic per (seed, counter) and across OpenMP thread counts,
// unbiased within statistical bounds (normal and subnormal ranges), exact values untouched,
// NaN/inf/overflow as documented.
#include "mixtrain/numeric/stochastic.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace mixtrain {
namespace {

static_assert(counter_rng(1, 2) == counter_rng(1, 2));

TEST(CounterRng, DeterministicAndSeedSensitive) {
  EXPECT_EQ(counter_rng(123, 456), counter_rng(123, 456));
  EXPECT_NE(counter_rng(123, 456), counter_rng(124, 456));
  EXPECT_NE(counter_rng(123, 456), counter_rng(123, 457));
  EXPECT_NE(counter_rng(0, 0), 0u);  // seed 0 is not degenerate
  // Every output bit is roughly fair over 1M draws (mean 0.5, sd 0.0005 per bit).
  int ones[32] = {};
  const int n = 1 << 20;
  for (int i = 0; i < n; ++i) {
    const uint32_t r = counter_rng(0, uint64_t(i));
    for (int b = 0; b < 32; ++b) ones[b] += (r >> b) & 1;
  }
  for (int b = 0; b < 32; ++b) EXPECT_NEAR(double(ones[b]) / n, 0.5, 0.003) << "bit " << b;
}

// Mean of n stochastic roundings of x; must equal x within 6 standard errors, where one rounding
// has standard deviation gap * sqrt(p (1 - p)).
template <class Round>
void expect_unbiased(float x, float lo, float hi, Round round, uint64_t seed) {
  const int n = 1 << 20;
  double sum = 0;
  int ups = 0;
  for (int i = 0; i < n; ++i) {
    const float r = round(x, counter_rng(seed, uint64_t(i)));
    ASSERT_TRUE(r == lo || r == hi) << r;
    sum += r;
    ups += r == hi;
  }
  const double gap = double(hi) - double(lo);
  const double p = (double(x) - double(lo)) / gap;
  const double se = gap * std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(sum / n, double(x), 6 * se + 1e-300) << "x=" << x;
  EXPECT_NEAR(double(ups) / n, p, 6 * std::sqrt(p * (1 - p) / n)) << "x=" << x;
}

float sr_bf16(float x, uint32_t r) { return f32_from_bf16(bf16_from_f32_stochastic(x, r)); }
float sr_fp16(float x, uint32_t r) { return f32_from_fp16(fp16_from_f32_stochastic(x, r)); }

TEST(StochasticBf16, Unbiased) {
  const float ulp = 0x1p-7f;
  expect_unbiased(1.0f + 0.3f * ulp, 1.0f, 1.0f + ulp, sr_bf16, 1);
  expect_unbiased(-(1.0f + 0.7f * ulp), -(1.0f + ulp), -1.0f, sr_bf16, 2);
  expect_unbiased(1.0f + 0.01f * ulp, 1.0f, 1.0f + ulp, sr_bf16, 3);
  // bf16 subnormal range: neighbours 2^-133 apart.
  expect_unbiased(0x1p-133f * 5.25f, 0x1p-133f * 5, 0x1p-133f * 6, sr_bf16, 4);
}

TEST(StochasticFp16, Unbiased) {
  const float ulp = 0x1p-10f;
  expect_unbiased(1.0f + 0.3f * ulp, 1.0f, 1.0f + ulp, sr_fp16, 5);
  expect_unbiased(-1000.2f, -1000.5f, -1000.0f, sr_fp16, 6);  // fp16 step is 0.5 here
  // Subnormal range: neighbours 2^-24 apart, more than 13 bits dropped.
  expect_unbiased(2.3f * 0x1p-24f, 2 * 0x1p-24f, 3 * 0x1p-24f, sr_fp16, 7);
  // Far below the smallest subnormal: rounds up to it with probability x / 2^-24.
  expect_unbiased(0.01f * 0x1p-24f, 0.0f, 0x1p-24f, sr_fp16, 8);
  // Just below the smallest normal: rounds up into it.
  expect_unbiased(1023.4f * 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f, sr_fp16, 9);
}

TEST(Stochastic, ExactValuesPassUnchanged) {
  std::mt19937_64 rng(3);
  const uint32_t extremes[] = {0u, 1u, 0xffffu, 0x1fffu, 0xffffffffu};
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const bf16 hb = bf16::from_bits(uint16_t(b));
    const fp16 hh = fp16::from_bits(uint16_t(b));
    const float fb = f32_from_bf16(hb), fh = f32_from_fp16(hh);
    for (uint32_t r : extremes) {
      if (!std::isnan(fb)) {
        ASSERT_EQ(bf16_from_f32_stochastic(fb, r), hb) << std::hex << b;
      }
      if (!std::isnan(fh)) {
        ASSERT_EQ(fp16_from_f32_stochastic(fh, r), hh) << std::hex << b;
      }
    }
    const uint32_t r = uint32_t(rng());
    if (!std::isnan(fb)) {
      ASSERT_EQ(bf16_from_f32_stochastic(fb, r), hb) << std::hex << b;
    }
    if (!std::isnan(fh)) {
      ASSERT_EQ(fp16_from_f32_stochastic(fh, r), hh) << std::hex << b;
    }
  }
}

TEST(Stochastic, ZeroNoiseTruncatesAndFullNoiseRoundsUp) {
  const float x = 1.0f + 0x1p-20f;  // between neighbours in both formats
  EXPECT_EQ(bf16_from_f32_stochastic(x, 0).bits(), 0x3f80);
  EXPECT_EQ(bf16_from_f32_stochastic(x, 0xffffffff).bits(), 0x3f81);
  EXPECT_EQ(fp16_from_f32_stochastic(x, 0).bits(), 0x3c00);
  EXPECT_EQ(fp16_from_f32_stochastic(x, 0xffffffff).bits(), 0x3c01);
  EXPECT_EQ(fp16_from_f32_stochastic(-x, 0xffffffff).bits(), 0xbc01);
}

TEST(Stochastic, NanInfAndOverflow) {
  for (uint32_t r : {0u, 0x8000u, 0xffffffffu}) {
    for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa12345u}) {
      const float f = std::bit_cast<float>(nan);
      EXPECT_EQ(bf16_from_f32_stochastic(f, r), bf16_from_f32(f)) << std::hex << nan;
      EXPECT_EQ(fp16_from_f32_stochastic(f, r), fp16_from_f32(f)) << std::hex << nan;
    }
    EXPECT_EQ(bf16_from_f32_stochastic(INFINITY, r).bits(), 0x7f80);
    EXPECT_EQ(bf16_from_f32_stochastic(-INFINITY, r).bits(), 0xff80);
    EXPECT_EQ(fp16_from_f32_stochastic(INFINITY, r).bits(), 0x7c00);
    EXPECT_EQ(fp16_from_f32_stochastic(-INFINITY, r).bits(), 0xfc00);
    EXPECT_EQ(fp16_from_f32_stochastic(65536.0f, r).bits(), 0x7c00);
    EXPECT_EQ(fp16_from_f32_stochastic(-1e30f, r).bits(), 0xfc00);
    EXPECT_EQ(fp16_from_f32_stochastic(0x1p-140f, r).bits(), 0x0000);
    EXPECT_EQ(fp16_from_f32_stochastic(-0.0f, r).bits(), 0x8000);
  }
  // Between max finite and the next step (inf) the rounding is proportional.
  EXPECT_EQ(bf16_from_f32_stochastic(3.4028235e38f, 0).bits(), 0x7f7f);
  EXPECT_EQ(bf16_from_f32_stochastic(3.4028235e38f, 0xffff).bits(), 0x7f80);
  EXPECT_EQ(fp16_from_f32_stochastic(65519.0f, 0).bits(), 0x7bff);
  EXPECT_EQ(fp16_from_f32_stochastic(65519.0f, 0x1fff).bits(), 0x7c00);
}

TEST(StochasticBulk, ElementIUsesCounterOffsetPlusI) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-10.f, 10.f);
  std::vector<float> src(1000);
  for (float& v : src) v = dist(rng);
  std::vector<bf16> b(src.size());
  std::vector<fp16> h(src.size());
  convert_f32_to_bf16_stochastic(src.data(), b.data(), src.size(), 99, 12345);
  convert_f32_to_fp16_stochastic(src.data(), h.data(), src.size(), 99, 12345);
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(b[i], bf16_from_f32_stochastic(src[i], counter_rng(99, 12345 + i)));
    ASSERT_EQ(h[i], fp16_from_f32_stochastic(src[i], counter_rng(99, 12345 + i)));
  }
}

TEST(StochasticBulk, IndependentOfThreadCountAndSplit) {
  const size_t n = (size_t{1} << 20) + 77;  // well past the parallel threshold, odd tail
  std::vector<float> src(n);
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (float& v : src) v = dist(rng);
  const int saved = omp_get_max_threads();
  std::vector<bf16> b1(n), b2(n), bsplit(n);
  std::vector<fp16> h1(n), h2(n);
  omp_set_num_threads(1);
  convert_f32_to_bf16_stochastic(src.data(), b1.data(), n, 7, 1000);
  convert_f32_to_fp16_stochastic(src.data(), h1.data(), n, 7, 1000);
  omp_set_num_threads(2);
  convert_f32_to_bf16_stochastic(src.data(), b2.data(), n, 7, 1000);
  convert_f32_to_fp16_stochastic(src.data(), h2.data(), n, 7, 1000);
  // Two calls with running offsets equal one call.
  const size_t k = 300001;
  convert_f32_to_bf16_stochastic(src.data(), bsplit.data(), k, 7, 1000);
  convert_f32_to_bf16_stochastic(src.data() + k, bsplit.data() + k, n - k, 7, 1000 + k);
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(b1.data(), b2.data(), n * sizeof(bf16)), 0);
  EXPECT_EQ(std::memcmp(h1.data(), h2.data(), n * sizeof(fp16)), 0);
  EXPECT_EQ(std::memcmp(b1.data(), bsplit.data(), n * sizeof(bf16)), 0);
  // A different seed changes the result.
  convert_f32_to_bf16_stochastic(src.data(), b2.data(), n, 8, 1000);
  EXPECT_NE(std::memcmp(b1.data(), b2.data(), n * sizeof(bf16)), 0);
}

}  // namespace
}  // namespace mixtrain
