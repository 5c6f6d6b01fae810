// The fused unscale kernel: fast path vs the scalar reference bit for bit (values, found_inf and
// the sum of squares) with inf/NaN at the start, middle, end and in the tail after the last full
// vector; exact fp32 products; the sum of squares against a double sum and against
// global_norm_f32; thread-count independence; empty buffers.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gradient_kernels.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/optim/clip.h"

namespace mixtrain {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Sizes around the 16-lane vector and the 4096-element block boundaries.
const std::vector<int64_t> kSizes = {1, 7, 15, 16, 17, 31, 4095, 4096, 4097, 4096 * 5 + 13, 100003};

std::vector<float> random_grads(int64_t n, uint64_t seed, float sigma = 3.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& x : g) x = nd(rng) * 65536.f;  // scaled-looking gradients
  return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs both paths on copies of g; expects identical bits everywhere; returns the fast result.
UnscaleResult check_fast_vs_ref(const std::vector<float>& g, float inv_scale,
                                std::vector<float>* out = nullptr) {
  std::vector<float> a = g, b = g;
  const UnscaleResult ra = unscale_and_check_ref(a.data(), int64_t(a.size()), inv_scale);
  const UnscaleResult rb = unscale_and_check(b.data(), int64_t(b.size()), inv_scale);
  EXPECT_TRUE(same_bits(a, b)) << "n=" << g.size();
  EXPECT_EQ(ra.found_inf, rb.found_inf) << "n=" << g.size();
  EXPECT_EQ(std::bit_cast<uint64_t>(ra.sum_squares), std::bit_cast<uint64_t>(rb.sum_squares))
      << "n=" << g.size() << " ref " << ra.sum_squares << " fast " << rb.sum_squares;
  if (out) *out = b;
  return rb;
}

TEST(Unscale, UsesAvx512WhereAvailable) {
  // Not a check: says which fast path the other tests compared against the reference.
  std::printf("fast path: %s\n", cpu_features().avx512f ? "AVX-512" : "portable blocks (no AVX-512F)");
}

TEST(Unscale, FastMatchesReferenceAndIsExact) {
  const float inv = float(1.0 / 65536.0);
  const float inv3 = float(1.0 / 3.0);  // not a power of two: every product rounds
  for (int64_t n : kSizes) {
    const std::vector<float> g = random_grads(n, uint64_t(n));
    for (float s : {inv, inv3}) {
      std::vector<float> out;
      const UnscaleResult r = check_fast_vs_ref(g, s, &out);
      EXPECT_FALSE(r.found_inf);
      for (size_t i = 0; i < g.size(); ++i) {
        const float want = g[i] * s;  // torch: fp32(g * inv_scale)
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(Unscale, NonFiniteAnywhereIsFound) {
  const float inv = float(1.0 / 1024.0);
  for (int64_t n : kSizes) {
    const std::vector<float> base = random_grads(n, 100 + uint64_t(n));
    std::vector<int64_t> where = {0, n / 2, n - 1};
    if (n % 16 != 0) where.push_back(n - n % 16 + (n % 16) / 2);  // in the tail after the last full vector
    if (n > 4096) where.push_back(4096);                          // first element of the second block
    for (int64_t pos : where)
      for (float bad : {kInf, -kInf, kNaN}) {
        std::vector<float> g = base;
        g[size_t(pos)] = bad;
        std::vector<float> out;
        const UnscaleResult r = check_fast_vs_ref(g, inv, &out);
        EXPECT_TRUE(r.found_inf) << "n=" << n << " pos=" << pos << " value=" << bad;
        // Every other element is still unscaled (torch does not stop at the first inf).
        if (pos != n - 1) {
          EXPECT_EQ(out[size_t(n - 1)], base[size_t(n - 1)] * inv);
        }
      }
  }
}

TEST(Unscale, OverflowInTheMultiplyIsFound) {
  // scale < 1 makes inv_scale > 1: a finite gradient can become inf (torch would miss it).
  std::vector<float> g(37, 1.f);
  g[35] = 1e38f;
  EXPECT_TRUE(check_fast_vs_ref(g, 100.f).found_inf);
  g[35] = 1e30f;
  EXPECT_FALSE(check_fast_vs_ref(g, 100.f).found_inf);
}

TEST(Unscale, InvScaleOneOnlyChecks) {
  std::vector<float> g = random_grads(4100, 7);
  g[4099] = kNaN;
  std::vector<float> out;
  const UnscaleResult r = check_fast_vs_ref(g, 1.f, &out);
  EXPECT_TRUE(r.found_inf);
  EXPECT_TRUE(same_bits(out, g));
}

TEST(Unscale, SumOfSquaresMatchesDoubleAndGlobalNorm) {
  for (int64_t n : kSizes) {
    const float inv = float(1.0 / 32768.0);
    const std::vector<float> g = random_grads(n, 200 + uint64_t(n));
    std::vector<float> out;
    const UnscaleResult r = check_fast_vs_ref(g, inv, &out);
    double want = 0;
    for (float y : out) want += double(y) * double(y);
    // fp32 inside 4096-element blocks (16 lanes, <= 256 terms each), double across blocks:
    // within a few fp32 ulps of the double sum (as optim/clip.h's norm).
    EXPECT_NEAR(r.sum_squares, want, 8 * FLT_EPSILON * want) << "n=" << n;
    // Same blocking as global_norm_f32: the norm the trainer gets is bit-identical to clip's.
    EXPECT_EQ(std::sqrt(r.sum_squares), global_norm_f32(out.data(), n)) << "n=" << n;
  }
}

TEST(Unscale, ThreadCountIndependent) {
  const int64_t n = 4096 * 37 + 5;  // enough blocks for the parallel loop
  std::vector<float> g = random_grads(n, 9);
  g[size_t(4096 * 20 + 3)] = kNaN;
  const int saved = omp_get_max_threads();
  for (bool with_nan : {false, true}) {
    std::vector<float> a = g, b = g;
    if (!with_nan) a[size_t(4096 * 20 + 3)] = b[size_t(4096 * 20 + 3)] = 1.f;
    omp_set_num_threads(1);
    const UnscaleResult ra = unscale_and_check(a.data(), n, 0.125f / 3.f);
    omp_set_num_threads(2);
    const UnscaleResult rb = unscale_and_check(b.data(), n, 0.125f / 3.f);
    EXPECT_TRUE(same_bits(a, b));
    EXPECT_EQ(ra.found_inf, with_nan);
    EXPECT_EQ(rb.found_inf, with_nan);
    if (!with_nan) {
      EXPECT_EQ(ra.sum_squares, rb.sum_squares);
    }
  }
  omp_set_num_threads(saved);
}

TEST(Unscale, ForceReferenceGivesTheSameBits) {
  const std::vector<float> g = random_grads(4096 * 3 + 21, 11);
  std::vector<float> a = g, b = g;
  const UnscaleResult ra = unscale_and_check(a.data(), int64_t(a.size()), 0.001f);
  set_force_reference(true);
  const UnscaleResult rb = unscale_and_check(b.data(), int64_t(b.size()), 0.001f);
  set_force_reference(false);
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_EQ(ra.sum_squares, rb.sum_squares);
}

TEST(Unscale, EmptyBuffer) {
  for (float* p : {static_cast<float*>(nullptr)}) {
    const UnscaleResult a = unscale_and_check_ref(p, 0, 0.5f);
    const UnscaleResult b = unscale_and_check(p, 0, 0.5f);
    EXPECT_FALSE(a.found_inf);
    EXPECT_FALSE(b.found_inf);
    EXPECT_EQ(a.sum_squares, 0.0);
    EXPECT_EQ(b.sum_squares, 0.0);
  }
}

}  // namespace
}  // namespace mixtrain
