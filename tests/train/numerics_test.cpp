// The numerics diagnostics through the engine (train/numerics_hook.h): a model rigged to overflow
// a known layer in fp16 is reported at that layer (forensics, skips by site, the scale's story);
// a forced underflow is counted exactly; --keep-fp32 on the rigged layer removes the overflow;
// the probes do not change the trajectory; a scale stuck at its minimum stops the run naming
// the site.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtrain/train/numerics_advice.h"
#include "mixtrain/train/numerics_hook.h"
#include "mixtrain/train/trainer.h"
#include "train/tiny_run.h"

namespace mixtrain {
namespace {

// Multiplies one parameter by `factor` before the first step (a test-only rig).
class ScaleWeightHook final : public TrainingHook {
 public:
  ScaleWeightHook(std::string name, float factor) : name_(std::move(name)), factor_(factor) {}
  void on_run_start(TrainingRun& run) override {
    Tensor w = run.model().params().param(name_);
    float* p = w.data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) p[i] *= factor_;
  }

 private:
  std::string name_;
  float factor_;
};

struct Collected {
  std::vector<StepRecord> steps;
};

TrainOptions rigged(PrecisionMode mode, float factor, Collected& c) {
  TrainOptions o = train_test::tiny_run(mode);
  o.steps = 3;
  o.force = true;  // no memory prediction: seconds saved per run
  o.add_hooks = [&c, factor](TrainingRun& run) {
    if (factor != 1.f)
      run.add_hook(std::make_unique<ScaleWeightHook>("transformer.h.1.mlp.c_fc.weight", factor));
    struct Keep final : TrainingHook {
      Collected* c;
      explicit Keep(Collected* c) : c(c) {}
      void on_step_end(TrainingRun&, const StepRecord& r) override { c->steps.push_back(r); }
    };
    run.add_hook(std::make_unique<Keep>(&c));
  };
  return o;
}

// c_fc weights ~0.02 scaled by 1e5 stay below 65504 (the cast is fine) but their GEMM's output
// (128 terms) does not: the fp16 output of transformer.h.1.mlp.c_fc overflows.
constexpr float kOverflowFactor = 1e5f;

TEST(OverflowForensics, RiggedLayerIsNamed) {
  Collected c;
  TrainOptions o = rigged(PrecisionMode::mixed16, kOverflowFactor, c);
  o.max_bad_steps = 100;
  const TrainSummary s = train(o);
  ASSERT_EQ(c.steps.size(), 3u);
  for (const StepRecord& r : c.steps) {
    EXPECT_TRUE(r.skipped) << r.step;
    EXPECT_EQ(r.overflow_site, "transformer.h.1.mlp.c_fc:linear") << r.step;
  }
  EXPECT_EQ(s.skips_by_site.at("transformer.h.1.mlp.c_fc:linear"), 3);
  EXPECT_NE(c.steps[0].scale_event.find("backoff 65536 -> 32768 at step 1: a non-finite loss first seen at "
                                        "transformer.h.1.mlp.c_fc:linear"),
            std::string::npos)
      << c.steps[0].scale_event;
}

std::string sites(const TrainSummary& s) {
  std::string t;
  for (const auto& [site, n] : s.skips_by_site) t += site + "=" + std::to_string(n) + " ";
  return t;
}

TEST(OverflowForensics, KeepFp32MovesThenRemovesTheOverflow) {
  {
    // c_fc in fp32: its output is fine, but c_proj casts it to fp16 and overflows there.
    Collected c;
    TrainOptions o = rigged(PrecisionMode::mixed16, kOverflowFactor, c);
    o.keep_fp32 = {"transformer.h.1.mlp.c_fc"};
    o.max_bad_steps = 100;
    const TrainSummary s = train(o);
    EXPECT_EQ(s.skips_by_site.count("transformer.h.1.mlp.c_fc:linear"), 0u) << sites(s);
    EXPECT_EQ(c.steps[0].overflow_site, "transformer.h.1.mlp.c_proj:cast") << sites(s);
  }
  {
    Collected c;
    TrainOptions o = rigged(PrecisionMode::mixed16, kOverflowFactor, c);
    o.keep_fp32 = {"*.h.1.mlp"};
    o.max_bad_steps = 100;
    const TrainSummary s = train(o);
    for (const auto& [site, n] : s.skips_by_site)
      EXPECT_EQ(site.find("h.1.mlp"), std::string::npos) << sites(s);
    EXPECT_EQ(s.skipped_steps, 0) << sites(s);
  }
}

TEST(LossScaleStory, EveryChangeHasItsReason) {
  {
    Collected c;  // clean steps, growth after each
    TrainOptions o = rigged(PrecisionMode::mixed16, 1.f, c);
    o.scaler.growth_interval = 1;
    train(o);
    ASSERT_EQ(c.steps.size(), 3u);
    EXPECT_EQ(c.steps[0].scale_event, "growth 65536 -> 131072 after 1 clean steps");
    EXPECT_EQ(c.steps[2].scale_event, "growth 262144 -> 524288 after 1 clean steps");
  }
  {
    Collected c;  // the rig overflows every step: hysteresis first, then backoffs
    TrainOptions o = rigged(PrecisionMode::mixed16, kOverflowFactor, c);
    o.scaler.hysteresis = 2;
    o.max_bad_steps = 100;
    train(o);
    ASSERT_EQ(c.steps.size(), 3u);
    EXPECT_EQ(c.steps[0].scale_event,
              "hysteresis consumed at step 1 (1 left): a non-finite loss first seen at "
              "transformer.h.1.mlp.c_fc:linear; "
              "scale kept");
    EXPECT_EQ(
        c.steps[1].scale_event,
        "backoff 65536 -> 32768 at step 2: a non-finite loss first seen at transformer.h.1.mlp.c_fc:linear");
  }
}

TEST(OverflowForensics, ScaleStuckAtTheMinimumStopsNamingTheSite) {
  Collected c;
  TrainOptions o = rigged(PrecisionMode::mixed16, kOverflowFactor, c);
  o.steps = 10;
  o.max_bad_steps = 100;
  o.scaler.init_scale = 4;
  o.scaler.min_scale = 1;
  try {
    train(o);
    FAIL() << "the run went on at the minimum scale";
  } catch (const DivergedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("loss scale stuck at its minimum 1"), std::string::npos) << m;
    EXPECT_NE(m.find("transformer.h.1.mlp.c_fc:linear"), std::string::npos) << m;
    EXPECT_EQ(e.step, 3);  // 4 -> 2 -> 1 (the minimum), then step 3 overflows at 1 again
  }
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> v;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

TEST(NumericsHook, ForcedUnderflowIsCountedExactly) {
  // wpe scaled by 2^-30: every |w| < 0.5 becomes < 2^-31, under fp16's 2^-25: flushed, every one
  // (none was exactly 0), while bf16 keeps them all normal.
  Collected c;
  TrainOptions o = train_test::tiny_run(PrecisionMode::true32);
  o.steps = 1;
  const std::string path = ::testing::TempDir() + "numerics_underflow.jsonl";
  o.numerics.path = path;
  std::remove(path.c_str());  // an existing numerics log is refused (without overwrite)
  o.add_hooks = [](TrainingRun& run) {
    run.add_hook(std::make_unique<ScaleWeightHook>("transformer.wpe.weight", 0x1p-30f));
  };
  train(o);
  bool seen = false;
  for (const nlohmann::json& j : read_lines(path)) {
    if (j["site"] != "transformer.wpe.weight" || j["kind"] != "weight") continue;
    seen = true;
    const double n = j["numel"];
    EXPECT_EQ(n, 128.0 * 128.0);
    EXPECT_EQ(j["fp16"]["flushed"].get<double>() * n, n);
    EXPECT_EQ(j["bf16"]["flushed"].get<double>() + j["bf16"]["subnormal"].get<double>(), 0.0);
  }
  EXPECT_TRUE(seen);
}

TEST(NumericsHook, ProbesDoNotChangeTheTrajectory) {
  for (PrecisionMode mode : {PrecisionMode::mixed16, PrecisionMode::true_bf16}) {
    Collected plain, probed;
    TrainOptions a = rigged(mode, 1.f, plain);
    a.steps = 4;
    a.inject_nonfinite = {2};  // the forensics' re-run too
    TrainOptions b = rigged(mode, 1.f, probed);
    b.steps = 4;
    b.inject_nonfinite = {2};
    b.numerics.path = ::testing::TempDir() + "numerics_same.jsonl";
    b.numerics.every = 1;
    std::remove(b.numerics.path.c_str());
    train(a);
    train(b);
    ASSERT_EQ(plain.steps.size(), probed.steps.size());
    for (size_t i = 0; i < plain.steps.size(); ++i) {
      const StepRecord &x = plain.steps[i], &y = probed.steps[i];
      EXPECT_EQ(std::bit_cast<uint64_t>(x.loss), std::bit_cast<uint64_t>(y.loss)) << i;
      EXPECT_EQ(std::isnan(x.grad_norm), std::isnan(y.grad_norm)) << i;
      if (!std::isnan(x.grad_norm)) {
        EXPECT_EQ(x.grad_norm, y.grad_norm) << i;
      }
      EXPECT_EQ(x.loss_scale, y.loss_scale) << i;
      EXPECT_EQ(x.skipped, y.skipped) << i;
      EXPECT_EQ(std::bit_cast<uint64_t>(x.val_loss), std::bit_cast<uint64_t>(y.val_loss)) << i;
    }
    EXPECT_TRUE(plain.steps[1].skipped);
  }
}

bool lists(const std::vector<OverflowingSite>& v, const std::string& site) {
  for (const OverflowingSite& s : v)
    if (s.site == site) return true;
  return false;
}

TEST(NumericsAdvice, ChangesWithTheRig) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed16);  // --advise runs 32-true anyway
  o.steps = 2;
  o.force = true;
  const NumericsAdvice plain = advise_numerics(o);
  EXPECT_EQ(plain.steps, 2);
  EXPECT_TRUE(plain.fp16_forward.empty()) << plain.text();
  EXPECT_TRUE(plain.modes[0].safe) << plain.text();
  EXPECT_LE(plain.min_activation_scale_log2, plain.max_loss_scale_log2) << plain.text();
  EXPECT_GT(plain.bf16_updates_lost, plain.fp16_updates_lost);  // bf16 has 3 fewer mantissa bits

  o.add_hooks = [](TrainingRun& run) {
    run.add_hook(std::make_unique<ScaleWeightHook>("transformer.h.1.mlp.c_fc.weight", kOverflowFactor));
  };
  const NumericsAdvice rig = advise_numerics(o);
  EXPECT_TRUE(lists(rig.fp16_forward, "transformer.h.1.mlp.c_fc")) << rig.text();
  EXPECT_FALSE(rig.modes[0].safe);
  EXPECT_NE(rig.text().find("16-mixed: fp16 forward overflows at transformer.h.1.mlp.c_fc (linear, amax "),
            std::string::npos)
      << rig.text();
  EXPECT_TRUE(rig.bf16_any.empty()) << rig.text();
  EXPECT_TRUE(rig.modes[1].safe) << rig.text();  // bf16-mixed
}

// fp8 advice. Plain gpt-nano: current, rowwise, mxfp8 and block keep every candidate within the
// bounds (delayed scaling, judged on step 2 from step 1's amaxes, is near its bound where the
// activations grow: not asserted). Rigged: one
// element of a weight set 2^17 times the weight's largest; a per-tensor scale (delayed, current)
// keeps it and turns the rest of that weight into zeros and subnormals, the 128 x 128 blocks lose
// the blocks around it, a row's or a 32-block's scale only that row's or block's. The advice names
// the site and the role, and the fix: the first recipe in its order that keeps every site.
TEST(NumericsAdvice, Fp8NamesTheSiteAnOutlierPutsOverTheBoundsAndARecipeThatKeepsIt) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_fp8);
  o.steps = 2;  // delayed scaling is judged from the second step
  o.force = true;
  o.fp8.keep_first_last = false;
  o.fp8.recipe = Fp8Recipe::current;
  const NumericsAdvice plain = advise_numerics(o);
  ASSERT_EQ(plain.fp8.size(), 16u) << plain.text();  // gpt-nano: 4 blocks x 4 linear layers
  EXPECT_TRUE(plain.fp8.front().first_last && !plain.fp8[4].first_last && plain.fp8.back().first_last);
  for (const Fp8SiteAdvice& s : plain.fp8)
    for (Fp8Recipe r : {Fp8Recipe::current, Fp8Recipe::rowwise, Fp8Recipe::mxfp8, Fp8Recipe::block}) {
      EXPECT_GT(s.at(r, Fp8Slot::grad_e5m2).count, 0) << s.site;
      EXPECT_TRUE(s.over_bound(r, fp8_default_format(r) == Fp8Format::hybrid).empty())
          << s.site << " " << fp8_recipe_name(r) << "\n"
          << plain.text();
    }
  ASSERT_EQ(plain.modes.back().mode, "fp8-mixed");
  EXPECT_TRUE(plain.modes.back().safe) << plain.text();

  const std::string site = "transformer.h.3.mlp.c_proj";  // the last block: ln_f and the head follow
  o.add_hooks = [site](TrainingRun& run) {
    struct Outlier final : TrainingHook {
      std::string name;
      void on_run_start(TrainingRun& run) override {
        Tensor w = run.model().params().param(name);
        float* p = w.data<float>();
        float m = 0;
        for (int64_t i = 0; i < w.numel(); ++i) m = std::max(m, std::fabs(p[i]));
        p[0] = m * 131072.f;
      }
    };
    auto h = std::make_unique<Outlier>();
    h->name = site + ".weight";
    run.add_hook(std::move(h));
  };
  const NumericsAdvice rig = advise_numerics(o);
  const std::string text = rig.text();
  const auto at =
      std::find_if(rig.fp8.begin(), rig.fp8.end(), [&](const Fp8SiteAdvice& s) { return s.site == site; });
  ASSERT_NE(at, rig.fp8.end()) << text;
  for (Fp8Recipe r : {Fp8Recipe::current, Fp8Recipe::block})
    EXPECT_EQ(at->over_bound(r, true), std::vector<std::string>{"weight"}) << fp8_recipe_name(r) << "\n"
                                                                           << text;
  EXPECT_GT(at->at(Fp8Recipe::current, Fp8Slot::weight).underflow,
            at->at(Fp8Recipe::current, Fp8Slot::weight).count / 2);
  EXPECT_TRUE(at->over_bound(Fp8Recipe::rowwise, false).empty()) << text;
  EXPECT_FALSE(rig.modes.back().safe) << text;
  EXPECT_NE(
      text.find("fp8-mixed: current (hybrid): 1 of 16 linear layers over the bounds (relative error 0.05 in "
                "E4M3, 0.1 in E5M2; 5.0% underflow): " +
                site + " (weight "),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("fp8-mixed: current (hybrid) puts 1 of the run's 16 fp8 linear layers over the bounds: use "
                "fp8_recipe rowwise (within the bounds at all of them)"),
      std::string::npos)
      << text;
}

}  // namespace
}  // namespace mixtrain
