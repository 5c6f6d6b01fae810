// mixtrain's GPT against PyTorch: the golden fixture (tools/make_gpt_fixture.py, torch 2.15, fp32)
// holds a tiny GPT's weights, a batch, the logits, the loss, every parameter gradient, and a
// 10-step AdamW trajectory with gradient clipping. mixtrain must reproduce each.
//
// Tolerances. Both sides compute in fp32 with different summation orders (oneDNN vs MKL GEMMs,
// blocked vs sequential reductions), so results differ by accumulated rounding, not by formula:
// - logits and loss: |d| <= 2e-5 * max|ref| + 1e-4 * |ref|. Each logit is a 32-term dot product
//   after 2 blocks of ~130-term sums: ~1e-6 relative error expected, 20x margin.
// - gradients: |d| <= 1e-4 * max|ref of that tensor| + 1e-3 * |ref|: backward chains twice as many
//   reductions and subtracts nearly equal terms in softmax / layer-norm backward, which turns an
//   fp32 rounding of the inputs into a larger relative error on small gradient elements; the
//   per-tensor max term makes the bound scale-free.
// - AdamW trajectory: losses within 1e-4 relative, gradient norms within 1e-4 relative, final
//   weights within 2e-5 absolute. Adam divides m by sqrt(v), so a gradient element that is only
//   rounding noise can move its weight by up to lr per step in either direction; here every
//   gradient element is far above fp32 noise, and 10 steps at lr 1e-3 change weights by <= 1e-2,
//   so 2e-5 is 0.2% of the largest possible movement.
#include <gtest/gtest.h>

#include <cmath>

#include "gpt_fixture_util.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/clip.h"

using namespace mixtrain;
using mixtrain::test::fixture_batch;
using mixtrain::test::fixture_config;
using mixtrain::test::kGptFixture;
using mixtrain::test::load_weights;

namespace {

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& ref,
                                 double abs_of_max, double rel, const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  double mx = 0;
  for (float r : ref) mx = std::max(mx, static_cast<double>(std::fabs(r)));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double budget = abs_of_max * mx + rel * std::fabs(ref[i]);
    const double ratio = std::fabs(static_cast<double>(got[i]) - ref[i]) / (budget > 0 ? budget : 1e-30);
    if (!(ratio <= worst)) {
      worst = ratio;
      at = i;
    }
  }
  if (worst > 1.0 || std::isnan(worst))
    return ::testing::AssertionFailure() << what << ": element " << at << " got " << got[at] << " ref "
                                         << ref[at] << " uses " << 100 * worst << "% of its budget";
  return ::testing::AssertionSuccess() << what << ": worst " << 100 * worst << "% of budget";
}

}  // namespace

TEST(GptFixture, LogitsLossAndEveryGradientMatchPyTorch) {
  const test::Fixture fx = test::load_fixture(kGptFixture);
  Gpt model(fixture_config(fx), 1);
  load_weights(model, fx);
  const auto [idx, tgt] = fixture_batch(fx);

  model.params().zero_grads();
  auto out = model.forward(idx, &tgt);
  EXPECT_TRUE(close(out.logits.value().to_floats(), fx.f32("logits"), 2e-5, 1e-4, "logits"));
  const double loss = out.loss.value().item();
  EXPECT_NEAR(loss, fx.f32("loss")[0], 1e-4 * std::fabs(fx.f32("loss")[0]));
  out.loss.backward();
  for (size_t i = 0; i < model.params().size(); ++i) {
    const auto& name = model.params().infos()[i].name;
    EXPECT_TRUE(
        close(model.params().grad(i).to_floats(), fx.f32("grad." + name), 1e-4, 1e-3, "grad." + name));
  }
}

TEST(GptFixture, TenAdamWStepsWithClippingMatchPyTorch) {
  const test::Fixture fx = test::load_fixture(kGptFixture);
  const auto& hyper = fx.header.at("hyper");
  Gpt model(fixture_config(fx), 1);
  load_weights(model, fx);
  const auto [idx, tgt] = fixture_batch(fx);
  AdamWConfig ac;
  ac.lr = hyper.at("lr").get<float>();
  ac.beta1 = hyper.at("beta1").get<float>();
  ac.beta2 = hyper.at("beta2").get<float>();
  ac.eps = hyper.at("eps").get<float>();
  ac.weight_decay = hyper.at("weight_decay").get<float>();
  AdamW opt(model.params(), ac);
  const double max_norm = hyper.at("grad_clip").get<double>();
  const auto& losses = fx.f32("adamw.losses");
  const auto& norms = fx.f32("adamw.grad_norms");
  for (size_t step = 0; step < losses.size(); ++step) {
    model.params().zero_grads();
    auto out = model.forward(idx, &tgt);
    const double loss = out.loss.value().item();
    out.loss.backward();
    const double norm = clip_grad_norm(model.params(), max_norm);
    opt.step(model.params());
    EXPECT_NEAR(loss, losses[step], 1e-4 * std::fabs(losses[step])) << "step " << step + 1;
    EXPECT_NEAR(norm, norms[step], 1e-4 * std::fabs(norms[step])) << "step " << step + 1;
  }
  for (size_t i = 0; i < model.params().size(); ++i) {
    const auto& name = model.params().infos()[i].name;
    const auto got = model.params().param(i).to_floats();
    const auto& ref = fx.f32("final." + name);
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t j = 0; j < ref.size(); ++j)
      worst = std::max(worst, std::fabs(static_cast<double>(got[j]) - ref[j]));
    EXPECT_LE(worst, 2e-5) << "final." << name;
  }
}
