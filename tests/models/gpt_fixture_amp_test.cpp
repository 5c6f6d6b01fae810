// mixtrain's GPT under autocast (bf16 and f16) against the fp32 PyTorch fixture
// (tools/make_gpt_fixture.py; see gpt_fixture_test.cpp): logits, loss and every parameter gradient
// must stay within a bound derived from the 16-bit format's epsilon, and must be measurably worse
// than the fp32 run's, which proves the GEMMs really ran in 16 bits.
//
// Error measure: per tensor, err = max_i |got_i - ref_i| / max_i |ref_i|, in units of the format's
// eps (bf16 2^-7, f16 2^-10); the bound is err <= k * eps with k the same for both formats, since
// every error below scales with eps.
// - Where the error comes from: every GEMM input is rounded to 16 bits (relative error <= eps/2)
//   and every GEMM output too; accumulation is fp32, and layer norm, softmax and the loss run in
//   fp32 on the rounded values; the residual stream stays fp32 (add promotes bf16 + f32 to f32).
//   A logit depends on 2 blocks x 4 GEMMs plus the tied head, ~3 roundings each (~15), which are
//   independent and unbiased, so they add like a random walk: sqrt(15) * eps/2 ~ 2 eps relative is
//   the a priori scale, and layer norm keeps each block's input at unit size so nothing amplifies
//   it. Measured on this fixture: 0.48 eps (bf16), 0.54 eps (f16). kLogitK = 1.5: under the a
//   priori scale, ~3x over the measured worst.
// - Gradients chain about twice as many roundings (dx and dW GEMMs of every layer, 16-bit gradients
//   of 16-bit activations, summed in 16 bits where one activation feeds several ops, e.g. qkv), and
//   softmax / layer-norm backward subtract nearly equal terms, so a gradient element inherits the
//   absolute error of larger ones; measured against the tensor's max, the a priori scale is
//   sqrt(2) x the logits' (~3 eps). Measured worst: 1.04 eps (bf16, h.1.ln_2.weight), 2.16 eps
//   (f16, h.1.ln_2.weight). kGradK = 4: ~2x over the measured worst.
// - Loss: log-sum-exp and picking the target logit are each 1-Lipschitz in the max norm, so the
//   mean cross-entropy moves by at most 2 * max|d logit| (plus fp32 noise): checked as such, which
//   ties the loss bound to the logit bound instead of a separate constant.
// - Not trivially loose: the errors must be more than 100x the fp32 run's (measured ~2e4x) and the
//   logit error at least 0.1 eps, so a run that silently stayed in fp32 fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gpt_fixture_util.h"
#include "mixtrain/amp/autocast.h"

using namespace mixtrain;
using autograd::NoGradGuard;
using autograd::Var;
using test::fixture_config;
using test::kGptFixture;
using test::load_weights;

namespace {

constexpr double kLogitK = 1.5;  // logits: 1.5 eps of max|logit|
constexpr double kGradK = 4.0;   // each gradient tensor: 4 eps of its max element

double max_abs(const std::vector<float>& v) {
  double mx = 0;
  for (float r : v) mx = std::max(mx, static_cast<double>(std::fabs(r)));
  return mx;
}

double abs_err(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  const double mx = max_abs(ref);
  return abs_err(got, ref) / (mx > 0 ? mx : 1.0);
}

struct RunErrors {
  DType logits_dtype = DType::f32;
  DType loss_dtype = DType::f32;
  double logits = 0;                                  // relative to max|ref logit|
  double logits_abs = 0;                              // max |d logit|
  double loss_abs = 0;                                // |d loss|
  std::vector<std::pair<std::string, double>> grads;  // per parameter
  double worst_grad() const {
    double w = 0;
    for (const auto& g : grads) w = std::max(w, g.second);
    return w;
  }
};

// Forward under autocast (plain fp32 when `ac` is f32), backward outside the region as torch
// recommends; errors against the fp32 PyTorch reference.
RunErrors run_with_backward(const test::Fixture& fx, DType ac) {
  Gpt model(fixture_config(fx), 1);
  load_weights(model, fx);
  const auto [idx, tgt] = test::fixture_batch(fx);
  model.params().zero_grads();
  RunErrors e;
  Var loss;
  {
    AutocastScope scope(ac != DType::f32, ac == DType::f32 ? DType::bf16 : ac);
    Gpt::Output out = model.forward(idx, &tgt);
    e.logits_dtype = out.logits.dtype();
    e.loss_dtype = out.loss.dtype();
    e.logits = rel_err(out.logits.value().to_floats(), fx.f32("logits"));
    e.logits_abs = abs_err(out.logits.value().to_floats(), fx.f32("logits"));
    e.loss_abs = std::fabs(out.loss.value().item() - fx.f32("loss")[0]);
    loss = out.loss;
  }
  loss.backward();
  for (size_t i = 0; i < model.params().size(); ++i) {
    const auto& name = model.params().infos()[i].name;
    EXPECT_EQ(model.params().grad(i).dtype(), DType::f32) << name;
    e.grads.emplace_back(name, rel_err(model.params().grad(i).to_floats(), fx.f32("grad." + name)));
  }
  return e;
}

void check_against_fixture(DType ac) {
  const test::Fixture fx = test::load_fixture(kGptFixture);
  const double eps = dtype_epsilon(ac);
  const RunErrors f32 = run_with_backward(fx, DType::f32);
  const RunErrors amp = run_with_backward(fx, ac);
  std::printf(
      "autocast %s (eps %.3g): logits %.3f eps of max|ref| (bound %.1f; fp32 run %.2e eps), "
      "|d loss| %.3g (bound 2 max|d logit| = %.3g), worst grad %.3f eps (bound %.1f; fp32 run %.2e eps)\n",
      std::string(dtype_name(ac)).c_str(), eps, amp.logits / eps, kLogitK, f32.logits / eps, amp.loss_abs,
      2 * amp.logits_abs, amp.worst_grad() / eps, kGradK, f32.worst_grad() / eps);
  for (const auto& [name, err] : amp.grads) std::printf("  grad.%-40s %.3f eps\n", name.c_str(), err / eps);

  // It really ran in 16 bits: the GEMM outputs (hence the logits) are 16-bit, and the errors are
  // those of a 16-bit format, far above fp32 rounding.
  EXPECT_EQ(amp.logits_dtype, ac);
  EXPECT_EQ(amp.loss_dtype, DType::f32);
  EXPECT_EQ(f32.logits_dtype, DType::f32);
  EXPECT_GT(amp.logits, 100 * f32.logits);
  EXPECT_GT(amp.worst_grad(), 100 * f32.worst_grad());
  EXPECT_GT(amp.logits, 0.1 * eps) << "logit error too small to come from " << dtype_name(ac) << " rounding";

  EXPECT_LE(amp.logits, kLogitK * eps) << "logits";
  EXPECT_LE(amp.loss_abs, 2 * amp.logits_abs + 1e-5) << "loss (1e-5: fp32 rounding of a ~4.6 loss)";
  for (const auto& [name, err] : amp.grads) EXPECT_LE(err, kGradK * eps) << "grad." << name;
}

}  // namespace

TEST(GptFixtureAmp, AutocastBf16LogitsLossAndGradientsWithinBf16Bounds) {
  check_against_fixture(DType::bf16);
}

TEST(GptFixtureAmp, AutocastF16LogitsLossAndGradientsWithinF16Bounds) { check_against_fixture(DType::f16); }

TEST(GptFixtureAmp, CastCacheHoldsEachGemmWeightOnceAndIsFreedAfterTheRegion) {
  const test::Fixture fx = test::load_fixture(kGptFixture);
  const int64_t before =
      MemoryTracker::global().snapshot().live[static_cast<size_t>(MemCategory::cast_cache)];
  Gpt model(fixture_config(fx), 1);
  load_weights(model, fx);
  const Tensor idx = test::fixture_batch(fx).first;
  {
    AutocastScope scope(true, DType::bf16);
    NoGradGuard ng;  // evaluation: nothing is cached, nothing recorded
    Gpt::Output out = model.forward(idx, nullptr, false);
    EXPECT_EQ(out.logits.dtype(), DType::bf16);
    EXPECT_EQ(autocast_cache_stats().entries, 0);
  }
  EXPECT_EQ(MemoryTracker::global().snapshot().live[static_cast<size_t>(MemCategory::cast_cache)], before);
  {
    AutocastScope scope(true, DType::bf16);
    Gpt::Output out = model.forward(idx, nullptr, false);
    // Every weight that feeds a GEMM is cached once: 2 x (c_attn, c_proj, c_fc, mlp c_proj) weights
    // and biases, plus the tied wte head: 17 entries.
    EXPECT_EQ(autocast_cache_stats().entries, 17);
  }
  EXPECT_EQ(MemoryTracker::global().snapshot().live[static_cast<size_t>(MemCategory::cast_cache)], before);
}
