// The numerics probes' statistics (kernels/numeric_stats.h): the fast pass against the reference
// (which converts every value with numeric/*.h) on every boundary of every format, on values
// spread over fp32's whole exponent range, and for any thread count; hand-counted cases; the
// half-ulp count of lost updates.
#include "kernels/numeric_stats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/threads.h"

namespace mixtrain {
namespace {

void expect_same(const NumericStats& a, const NumericStats& b, const char* what) {
  EXPECT_EQ(a.numel, b.numel) << what;
  EXPECT_EQ(a.zeros, b.zeros) << what;
  EXPECT_EQ(a.nonfinite, b.nonfinite) << what;
  EXPECT_EQ(std::bit_cast<uint32_t>(a.amax), std::bit_cast<uint32_t>(b.amax)) << what;
  for (size_t f = 0; f < kNumProbeFormats; ++f) {
    const char* name = probe_format_name(static_cast<ProbeFormat>(f));
    EXPECT_EQ(a.formats[f].subnormal, b.formats[f].subnormal) << what << " " << name << " subnormal";
    EXPECT_EQ(a.formats[f].flushed, b.formats[f].flushed) << what << " " << name << " flushed";
    EXPECT_EQ(a.formats[f].overflow, b.formats[f].overflow) << what << " " << name << " overflow";
  }
}

// Every boundary of every format, each with its fp32 neighbours on both sides, both signs.
std::vector<float> boundary_values() {
  const float edges[] = {0x1p-25f,  0x1p-24f,    0x1p-14f - 0x1p-25f,
                         0x1p-14f,  65504.f,     65520.f,  // fp16
                         0x1p-134f, 0x1p-133f,   0x1p-126f - 0x1p-134f,
                         0x1p-126f, 0x1.fep127f, 0x1.ffp127f,  // bf16
                         0x1p-10f,  0x1p-9f,     0x1p-6f - 0x1p-10f,
                         0x1p-6f,   448.f,       464.f,
                         480.f,  // E4M3
                         0x1p-17f,  0x1p-16f,    0x1p-14f - 0x1p-17f,
                         57344.f,   61440.f,     65536.f,  // E5M2
                         1.f,       0x1p-149f,   FLT_MAX};
  std::vector<float> v = {0.f, -0.f, INFINITY, -INFINITY, NAN};
  for (float e : edges)
    for (float x : {std::nextafter(e, 0.f), e, std::nextafter(e, INFINITY)}) v.insert(v.end(), {x, -x});
  return v;
}

TEST(NumericStats, FastMatchesReferenceOnEveryBoundary) {
  const std::vector<float> v = boundary_values();
  expect_same(numeric_stats_f32(v.data(), static_cast<int64_t>(v.size())),
              numeric_stats_ref(v.data(), static_cast<int64_t>(v.size())), "boundaries");
}

TEST(NumericStats, FastMatchesReferenceOverTheExponentRangeForAnyThreadCount) {
  std::mt19937 rng(7);
  std::vector<float> v(100003);                                               // not a multiple of the block
  for (float& x : v) x = std::bit_cast<float>(static_cast<uint32_t>(rng()));  // every exponent, NaNs included
  const NumericStats ref = numeric_stats_ref(v.data(), static_cast<int64_t>(v.size()));
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    expect_same(numeric_stats_f32(v.data(), static_cast<int64_t>(v.size())), ref, "random bits");
  }
}

TEST(NumericStats, HandCountedCases) {
  // 1e-8 flushes in fp16 (< 2^-25) but is normal in bf16; 1e-6 is an fp16 subnormal; 7e4
  // overflows fp16 and E4M3/E5M2; 300 overflows neither fp16 nor E4M3 (448).
  const std::vector<float> v = {0.f, 1e-8f, -1e-6f, 7e4f, 300.f, INFINITY, 1.f};
  const NumericStats s = numeric_stats_f32(v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(s.numel, 7);
  EXPECT_EQ(s.zeros, 1);
  EXPECT_EQ(s.nonfinite, 1);
  EXPECT_EQ(s.amax, 7e4f);
  EXPECT_EQ(s.in(ProbeFormat::fp16).flushed, 1);
  EXPECT_EQ(s.in(ProbeFormat::fp16).subnormal, 1);
  EXPECT_EQ(s.in(ProbeFormat::fp16).overflow, 1);
  EXPECT_EQ(
      s.in(ProbeFormat::bf16).flushed + s.in(ProbeFormat::bf16).subnormal + s.in(ProbeFormat::bf16).overflow,
      0);
  EXPECT_EQ(s.in(ProbeFormat::e4m3).overflow, 1);  // 7e4 (300 fits under 448)
  EXPECT_EQ(s.in(ProbeFormat::e5m2).overflow, 1);
  EXPECT_EQ(s.in(ProbeFormat::e4m3).flushed, 2);  // 1e-8 and 1e-6 are below 2^-10
}

TEST(NumericStats, TensorOfAnyDtypeIsWidenedExactly) {
  const Tensor t = Tensor::from_floats({0.f, 1e-40f, 3e38f}, {3}, DType::bf16);
  const NumericStats s = numeric_stats(t);
  EXPECT_EQ(s.zeros, 1);
  EXPECT_EQ(s.in(ProbeFormat::bf16).subnormal, 1);
  EXPECT_EQ(s.in(ProbeFormat::fp16).overflow, 1);
}

TEST(NumericStats, SixteenBitTensorsMatchTheReferenceOnTheirValues) {
  std::mt19937 rng(11);
  std::vector<float> v(9000);
  for (float& x : v)
    x = std::ldexp(static_cast<float>(rng() % 2000) - 1000.f, static_cast<int>(rng() % 60) - 40);
  for (DType d : {DType::bf16, DType::f16}) {
    const Tensor t = Tensor::from_floats(v, {9000}, d);
    const std::vector<float> widened = t.to_floats();
    expect_same(numeric_stats(t), numeric_stats_ref(widened.data(), 9000), dtype_name(d).data());
  }
}

TEST(Log2Histogram, BinsByExponentField) {
  const std::vector<float> v = {0.f, -1e-45f, 1.f, 1.5f, -0.75f, 0x1p-14f, INFINITY};
  Log2Histogram h{};
  add_log2_histogram(v.data(), static_cast<int64_t>(v.size()), h);
  EXPECT_EQ(h[0], 2);         // 0 and an fp32 subnormal
  EXPECT_EQ(h[127], 2);       // [1, 2)
  EXPECT_EQ(h[126], 1);       // [0.5, 1)
  EXPECT_EQ(h[127 - 14], 1);  // 2^-14
  EXPECT_EQ(h[255], 1);
}

TEST(HalfUlp, LostUpdatesCountedExactly) {
  // bf16 weight 1.0: ulp 2^-7, half 2^-8. fp16: ulp 2^-10, half 2^-11.
  const std::vector<float> w = {1.f, 1.f, 1.f, 0.f, 256.f};
  const std::vector<float> u = {0x1p-9f, 0x1p-8f, 0x1p-12f, 0x1p-140f, 0.5f};
  const int64_t n = static_cast<int64_t>(w.size());
  // bf16: 2^-9 (lost), 2^-8 (not: equal), 2^-12 (lost), 2^-140 on 0 (lost: < 2^-134), 0.5 on 256 (lost: half
  // ulp 1)
  EXPECT_EQ(count_below_half_ulp_ref(u.data(), w.data(), n, DType::bf16), 4);
  // fp16: 2^-12 lost; 2^-140 on 0 lost (< 2^-25); 0.5 on 256: half ulp 0.125, kept
  EXPECT_EQ(count_below_half_ulp_ref(u.data(), w.data(), n, DType::f16), 2);
  EXPECT_EQ(count_below_half_ulp_ref(u.data(), w.data(), n, DType::f32), 0);
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    EXPECT_EQ(count_below_half_ulp(u.data(), w.data(), n, d),
              count_below_half_ulp_ref(u.data(), w.data(), n, d));
}

TEST(HalfUlp, UpdateStatsOfBeforeAndAfter) {
  const std::vector<float> before = {1.f, 1.f, 2.f};
  const std::vector<float> after = {1.f + 0x1p-9f, 1.f + 0x1p-6f, 2.f};
  const UpdateStats u = update_stats(before.data(), after.data(), 3, DType::f32);
  EXPECT_EQ(u.stats.amax, 0x1p-6f);
  EXPECT_EQ(u.stats.zeros, 1);
  EXPECT_EQ(u.below_half_ulp[0], 1);  // f32: only the zero update
  EXPECT_EQ(u.below_half_ulp[1], 2);  // bf16 (half ulp of 1: 2^-8): 2^-9 and the zero
  EXPECT_EQ(u.below_half_ulp[2], 1);  // fp16 (2^-11): the zero
}

TEST(HalfUlp, FastMatchesReferenceOnRandomWeights) {
  std::mt19937 rng(3);
  std::lognormal_distribution<float> mag(-6.f, 4.f);
  std::vector<float> w(50001), u(50001);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = (rng() & 1 ? 1.f : -1.f) * mag(rng);
    u[i] = w[i] * std::ldexp(1.f, -static_cast<int>(rng() % 16)) * (rng() & 1 ? 1.f : -1.f);
  }
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    EXPECT_EQ(count_below_half_ulp(u.data(), w.data(), 50001, d),
              count_below_half_ulp_ref(u.data(), w.data(), 50001, d))
        << dtype_name(d);
}

}  // namespace
}  // namespace mixtrain
