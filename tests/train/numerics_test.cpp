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

#include "mixtrain/core/error.h"
#include "mixtrain/train/numerics_advice.h"
#include "mixtrain/train/numerics_compare.h"
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

// ---- numerics --compare (train/numerics_compare.h), on logs written by hand ----------------------

std::string write_log(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream f(path, std::ios::trunc);
  for (const std::string& l : lines) f << l << "\n";
  return path;
}
std::string site_line(int step, const char* site, const char* kind, double amax, double loss) {
  nlohmann::json j{{"step", step}, {"site", site}, {"op", "linear"},
                   {"kind", kind}, {"amax", amax}, {"loss", loss}};
  return j.dump();
}
std::string fp8_line(int step, const char* site, const char* role, const char* format, double rel,
                     double under, double loss) {
  nlohmann::json j{{"step", step},       {"site", site},      {"op", "fp8_linear"}, {"kind", "fp8"},
                   {"role", role},       {"recipe", "block"}, {"format", format},   {"rel_error", rel},
                   {"underflow", under}, {"saturated", 0.0},  {"loss", loss}};
  return j.dump();
}

TEST(NumericsCompare, NamesTheLossDepartureTheFirstSiteApartAndTheCastsOverTheirBounds) {
  // Steps 1-4. The run's loss parts at step 3 (+5%); the site "b" parts at step 2 (amax 1 -> 1.5),
  // "a" at step 3 (it comes first in the file, but later); "c" never. The run's fp8 casts: a's
  // output gradient in E4M3 over both bounds at steps 2 and 3, b's input fine; step 4's is after
  // the departure and does not count.
  const std::string base = write_log(
      "cmp_base.jsonl", {site_line(1, "a", "forward", 2.0, 4.0), site_line(1, "b", "grad", 1.0, 4.0),
                         site_line(1, "c", "forward", 3.0, 4.0), site_line(2, "a", "forward", 2.0, 3.5),
                         site_line(2, "b", "grad", 1.0, 3.5), site_line(2, "c", "forward", 3.0, 3.5),
                         site_line(3, "a", "forward", 2.0, 3.0), site_line(3, "b", "grad", 1.0, 3.0),
                         site_line(3, "c", "forward", 3.0, 3.0), site_line(4, "a", "forward", 2.0, 2.9)});
  const std::string run = write_log(
      "cmp_run.jsonl",
      {site_line(1, "a", "forward", 2.0, 4.0), site_line(1, "b", "grad", 1.0, 4.0),
       site_line(1, "c", "forward", 3.0, 4.0), fp8_line(1, "b", "input", "f8_e4m3", 0.03, 0.0, 4.0),
       site_line(2, "a", "forward", 2.05, 3.52), site_line(2, "b", "grad", 1.5, 3.52),
       site_line(2, "c", "forward", 3.0, 3.52), fp8_line(2, "a", "grad_output", "f8_e4m3", 0.2, 0.4, 3.52),
       site_line(3, "a", "forward", 3.0, 3.15), site_line(3, "b", "grad", 1.5, 3.15),
       site_line(3, "c", "forward", 3.1, 3.15), fp8_line(3, "a", "grad_output", "f8_e4m3", 0.3, 0.2, 3.15),
       site_line(4, "a", "forward", 3.0, 3.0), fp8_line(4, "c", "grad_output", "f8_e4m3", 0.9, 0.9, 3.0)});
  const NumericsComparison c = compare_numerics(base, run, 0.01, 0.10, /*window=*/1);  // step by step
  EXPECT_EQ(c.steps_compared, 4);
  EXPECT_EQ(c.loss_step, 3);
  EXPECT_EQ(c.loss_base, 3.0);
  EXPECT_EQ(c.loss_run, 3.15);
  ASSERT_EQ(c.sites.size(), 2u);
  EXPECT_EQ(c.sites[0].site, "b");
  EXPECT_EQ(c.sites[0].kind, "grad");
  EXPECT_EQ(c.sites[0].step, 2);
  EXPECT_EQ(c.sites[1].site, "a");
  EXPECT_EQ(c.sites[1].step, 3);
  ASSERT_EQ(c.fp8.size(), 1u);
  EXPECT_EQ(c.fp8[0].site, "a");
  EXPECT_EQ(c.fp8[0].role, "grad_output");
  EXPECT_EQ(c.fp8[0].first_step, 2);
  EXPECT_EQ(c.fp8[0].steps_over, 2);
  EXPECT_EQ(c.fp8[0].worst_rel_error, 0.3);
  EXPECT_EQ(c.fp8[0].worst_underflow, 0.4);
  const std::string t = c.text();
  EXPECT_NE(t.find("loss departs at step 3: step by step, base 3, run 3.15 (apart "
                   "5.00%; bound 1.00%)"),
            std::string::npos)
      << t;  // E4M3 gradients over their bounds
  EXPECT_NE(t.find("fp8_keep 'a'"), std::string::npos) << t;

  // The default window (5): the means of steps 1-3, base 3.5 and run 3.55667, part by 1.62%.
  const NumericsComparison w = compare_numerics(base, run);
  EXPECT_EQ(w.loss_step, 3);
  EXPECT_EQ(w.loss_base, 3.5);
  EXPECT_NEAR(w.loss_run, 10.67 / 3, 1e-12);
  // Looser bounds: no departure (the furthest apart named: steps 1-4, 3.35 against 3.4175), no
  // site apart.
  const NumericsComparison loose = compare_numerics(base, run, 0.1, 0.6);
  EXPECT_EQ(loose.loss_step, -1);
  EXPECT_EQ(loose.worst_step, 4);
  EXPECT_TRUE(loose.sites.empty());
  EXPECT_EQ(loose.fp8.size(), 2u);  // without a departure every step counts: c's at step 4 too
  EXPECT_NE(loose.text().find(
                "loss within 10.00% of the base's at every compared step (the mean loss of the last 5 "
                "compared steps; furthest apart: 2.01% at step 4)"),
            std::string::npos)
      << loose.text();
}

TEST(NumericsCompare, ANonFiniteLossOnOneSideIsADeparture) {
  nlohmann::json nan_loss{{"step", 2},         {"site", "a"}, {"op", "linear"},
                          {"kind", "forward"}, {"amax", 1.0}, {"loss", nullptr}};
  const std::string base = write_log(
      "cmp_nan_base.jsonl", {site_line(1, "a", "forward", 1.0, 4.0), site_line(2, "a", "forward", 1.0, 3.9)});
  const std::string run =
      write_log("cmp_nan_run.jsonl", {site_line(1, "a", "forward", 1.0, 4.0), nan_loss.dump()});
  const NumericsComparison c = compare_numerics(base, run);
  EXPECT_EQ(c.loss_step, 2);
  EXPECT_TRUE(std::isnan(c.loss_run));
}

TEST(NumericsCompare, BadLogsAreRefusedWithTheirPathAndLine) {
  const std::string good = write_log("cmp_good.jsonl", {site_line(1, "a", "forward", 1.0, 4.0)});
  const auto message = [&](const std::string& bad) {
    try {
      compare_numerics(good, bad);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string not_json = write_log("cmp_bad1.jsonl", {site_line(1, "a", "forward", 1.0, 4.0), "{oops"});
  EXPECT_NE(message(not_json).find("cmp_bad1.jsonl:2: not valid JSON"), std::string::npos)
      << message(not_json);
  const std::string no_step = write_log("cmp_bad2.jsonl", {R"({"site": "a", "kind": "forward"})"});
  EXPECT_NE(message(no_step).find("cmp_bad2.jsonl:1: no positive integer \"step\""), std::string::npos);
  const std::string amax_text = write_log(
      "cmp_bad3.jsonl", {R"({"step": 1, "site": "a", "op": "linear", "kind": "forward", "amax": "big"})"});
  EXPECT_NE(message(amax_text).find("cmp_bad3.jsonl:1: \"amax\" is not a number (\"big\")"),
            std::string::npos)
      << message(amax_text);
  const std::string no_loss = write_log(
      "cmp_bad4.jsonl", {R"({"step": 1, "site": "a", "op": "linear", "kind": "forward", "amax": 1.0})"});
  EXPECT_NE(message(no_loss).find("no step records a \"loss\""), std::string::npos) << message(no_loss);
  const std::string other_steps = write_log("cmp_bad5.jsonl", {site_line(7, "a", "forward", 1.0, 4.0)});
  EXPECT_NE(message(other_steps).find("no sampled step with a loss in both"), std::string::npos);
  EXPECT_NE(message(::testing::TempDir() + "cmp_missing.jsonl").find("cannot open it"), std::string::npos);
  EXPECT_THROW(compare_numerics(good, good, 0.0), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
