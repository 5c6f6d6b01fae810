// grad_global_norm / clip_grad_norm: the norm against a double sum, torch's clipping rule,
// non-finite norms, thread-count independence.
#include "mixtrain/optim/clip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>

#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

double double_norm(const ParameterStore& s) {
  double sum = 0;
  for (float g : s.flat_grads().to_floats()) sum += double(g) * double(g);
  return std::sqrt(sum);
}

ParameterStore big_store(uint64_t seed) {
  ParameterStore s;
  s.declare("a", {1000, 777}, true);
  s.declare("b", {777}, false);
  s.declare("c", {333, 1001}, true);
  s.finalize(DType::f32, DType::f32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1e-2f);
  float* g = s.flat_grads().data<float>();
  for (const ParamInfo& info : s.infos())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i) g[i] = nd(rng);
  return s;
}

TEST(Clip, NormMatchesDoubleSum) {
  ParameterStore s = small_store();
  fill_grads(s, 1);
  EXPECT_NEAR(grad_global_norm(s), double_norm(s), 4 * FLT_EPSILON * double_norm(s));
  ParameterStore big = big_store(1);
  // ~1.1M elements: fp32 blocks of 4096 + double across blocks stay within a few fp32 ulps.
  EXPECT_NEAR(grad_global_norm(big), double_norm(big), 4 * FLT_EPSILON * double_norm(big));
  ParameterStore zero = small_store();
  EXPECT_EQ(grad_global_norm(zero), 0.0);
}

TEST(Clip, NormIsThreadCountIndependent) {
  ParameterStore big = big_store(2);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = grad_global_norm(big);
  omp_set_num_threads(2);
  const double two = grad_global_norm(big);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
}

TEST(Clip, NoOpWhenUnderMaxNorm) {
  ParameterStore s = small_store();
  fill_grads(s, 1);
  const std::vector<float> before = s.flat_grads().to_floats();
  const double norm = grad_global_norm(s);
  EXPECT_EQ(clip_grad_norm(s, norm * 2), norm);
  EXPECT_EQ(s.flat_grads().to_floats(), before);
  // At exactly max_norm, clip_coef = max / (norm + 1e-6) < 1: torch scales (by ~1 - 1e-6/norm).
}

TEST(Clip, ScalesWhenOverMaxNorm) {
  ParameterStore s = small_store();
  fill_grads(s, 1);
  const std::vector<float> before = s.flat_grads().to_floats();
  const double norm = grad_global_norm(s);
  const double max_norm = norm / 4;
  EXPECT_EQ(clip_grad_norm(s, max_norm), norm);  // returns the norm before clipping
  const float coef = float(max_norm / (norm + 1e-6));
  const std::vector<float> after = s.flat_grads().to_floats();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i], before[i] * coef) << i;
  EXPECT_NEAR(grad_global_norm(s), max_norm, 1e-5 * max_norm);
}

TEST(Clip, NonFiniteNormLeavesGradientsAlone) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    ParameterStore s = small_store();
    fill_grads(s, 1);
    s.flat_grads().data<float>()[3] = bad;
    const std::vector<float> before = s.flat_grads().to_floats();
    const double norm = clip_grad_norm(s, 1e-3);
    EXPECT_TRUE(std::isnan(bad) ? std::isnan(norm) : std::isinf(norm)) << norm;
    const std::vector<float> after = s.flat_grads().to_floats();
    for (size_t i = 0; i < after.size(); ++i)
      EXPECT_TRUE(after[i] == before[i] || (std::isnan(after[i]) && std::isnan(before[i]))) << i;
  }
}

TEST(Clip, BadArguments) {
  ParameterStore s = small_store();
  expect_throw<ArgumentError>([&] { clip_grad_norm(s, 0.0); });
  expect_throw<ArgumentError>([&] { clip_grad_norm(s, -1.0); });
  expect_throw<ArgumentError>([&] { clip_grad_norm(s, NAN); });
  ParameterStore g16;
  g16.declare("x", {4}, true);
  g16.finalize(DType::f32, DType::bf16);
  expect_throw<DTypeError>([&] { grad_global_norm(g16); });
}

}  // namespace
}  // namespace mixtrain
