// GradScaler: the update rule against a transcription of torch's _amp_update_scale_ (extended by
// DeepSpeed's hysteresis and the min/max bounds) on scripted and random overflow sequences; the
// fp32-max cap; static and disabled scalers; checkpoint round trip; the unscale protocol.
#include "mixtrain/amp/grad_scaler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "mixtrain/optim/clip.h"
#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using testing_optim::expect_throw;
using testing_optim::fill_grads;
using testing_optim::small_store;

// The reference model. update() is torch's amp_update_scale_cpu_kernel line for line (the scale
// is a float there: each product is formed in double and rounded to float), with DeepSpeed's
// hysteresis (loss_scaler.py, consecutive_hysteresis=false) and the min/max clamps added where
// DeepSpeed and Apex put them. hysteresis 1, min 0, max inf: exactly torch.
struct RefScaler {
  double scale;
  int64_t growth_tracker = 0;
  int64_t hysteresis_left;
  double growth_factor, backoff_factor, min_scale, max_scale;
  int64_t growth_interval, hysteresis;

  explicit RefScaler(const GradScalerConfig& c)
      : scale(float(c.init_scale)),
        hysteresis_left(c.hysteresis),
        growth_factor(c.growth_factor),
        backoff_factor(c.backoff_factor),
        min_scale(c.min_scale),
        max_scale(c.max_scale),
        growth_interval(c.growth_interval),
        hysteresis(c.hysteresis) {}

  void update(bool found_inf) {
    if (found_inf) {
      growth_tracker = 0;
      if (hysteresis_left > 1) {
        hysteresis_left -= 1;
      } else {
        // mixtrain: never below min_scale, and never 0 (torch's float scale can underflow to 0).
        const double floor = std::max(min_scale, double(std::numeric_limits<float>::denorm_min()));
        scale = std::max(double(float(scale * backoff_factor)), floor);
      }
    } else {
      const int64_t successful = growth_tracker + 1;
      if (successful == growth_interval) {
        const float new_scale = float(std::min(scale * growth_factor, max_scale));
        if (std::isfinite(new_scale)) scale = new_scale;
        growth_tracker = 0;
        hysteresis_left = hysteresis;
      } else {
        growth_tracker = successful;
      }
    }
  }
};

void expect_same(const GradScaler& s, const RefScaler& r, int step) {
  ASSERT_EQ(s.state().scale, r.scale) << "step " << step;
  ASSERT_EQ(s.scale(), float(r.scale)) << "step " << step;
  ASSERT_EQ(s.state().growth_tracker, r.growth_tracker) << "step " << step;
  ASSERT_EQ(s.state().hysteresis_left, r.hysteresis_left) << "step " << step;
}

// Overflow script: true = found_inf at that iteration.
std::vector<bool> random_script(int n, double p_overflow, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution b(p_overflow);
  std::vector<bool> s(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) s[size_t(i)] = b(rng);
  return s;
}

GradScalerConfig with_interval(int64_t interval) {
  GradScalerConfig c;
  c.growth_interval = interval;
  return c;
}

TEST(GradScaler, DefaultsAreTorchs) {
  const GradScalerConfig c;
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.init_scale, 65536.0);
  EXPECT_EQ(c.growth_factor, 2.0);
  EXPECT_EQ(c.backoff_factor, 0.5);
  EXPECT_EQ(c.growth_interval, 2000);
  EXPECT_EQ(c.hysteresis, 1);
  GradScaler s;
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(GradScaler, GrowsExactlyAtTheInterval) {
  GradScaler s(with_interval(3));
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.state().growth_tracker, 2);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.f);
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_FALSE(s.growth_capped());
  GradScaler d;  // the default interval: 1999 clean steps keep the scale, the 2000th doubles it
  for (int i = 0; i < 1999; ++i) d.update(false);
  EXPECT_EQ(d.scale(), 65536.f);
  d.update(false);
  EXPECT_EQ(d.scale(), 131072.f);
}

TEST(GradScaler, BackoffResetsTheTracker) {
  GradScaler s(with_interval(3));
  s.update(false);
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.state().overflows, 1);
  EXPECT_EQ(s.state().skipped_steps, 1);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.f);  // a full interval is needed again
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.f);
}

TEST(GradScaler, MatchesTorchsRuleOnRandomScripts) {
  struct Case {
    double growth, backoff;
    int64_t interval;
    double p;
  };
  const Case cases[] = {{2.0, 0.5, 1, 0.3},   {2.0, 0.5, 2, 0.2},     {2.0, 0.5, 7, 0.05},
                        {1.5, 0.25, 3, 0.05}, {1.001, 0.999, 1, 0.5}, {3.0, 0.1, 5, 0.03}};
  uint64_t seed = 1;
  for (const Case& k : cases) {
    GradScalerConfig c;
    c.growth_factor = k.growth;
    c.backoff_factor = k.backoff;
    c.growth_interval = k.interval;
    c.init_scale = 3.0;  // not a power of two: exercises the float rounding of each product
    GradScaler s(c);
    RefScaler r(c);
    int step = 0;
    for (bool inf : random_script(5000, k.p, seed++)) {
      s.update(inf);
      r.update(inf);
      expect_same(s, r, step++);
      ASSERT_FALSE(s.hit_min_scale());  // pure torch: never at mixtrain's non-zero floor
    }
  }
}

TEST(GradScaler, NeverGrowsPastFp32Max) {
  GradScalerConfig c = with_interval(1);
  c.init_scale = std::ldexp(1.0, 127);
  GradScaler s(c);
  RefScaler r(c);
  for (int i = 0; i < 10; ++i) {
    s.update(false);
    r.update(false);
    expect_same(s, r, i);
    EXPECT_TRUE(std::isfinite(s.scale()));
    EXPECT_EQ(s.scale(), std::ldexp(1.f, 127));
    EXPECT_TRUE(s.growth_capped());
    EXPECT_EQ(s.state().growth_tracker, 0);
  }
  // 1.5 * 2^127 still fits, then the next growth would not.
  c.growth_factor = 1.5;
  GradScaler g(c);
  g.update(false);
  EXPECT_EQ(g.scale(), 1.5f * std::ldexp(1.f, 127));
  EXPECT_FALSE(g.growth_capped());
  g.update(false);
  EXPECT_EQ(g.scale(), 1.5f * std::ldexp(1.f, 127));
  EXPECT_TRUE(g.growth_capped());
}

TEST(GradScaler, HysteresisDelaysBackoffAndRefillsOnGrowth) {
  GradScalerConfig c = with_interval(2);
  c.hysteresis = 3;
  GradScaler s(c);
  s.update(true);  // 1st and 2nd overflows spend hysteresis; the scale stays
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  s.update(true);
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.state().hysteresis_left, 1);
  EXPECT_EQ(s.state().skipped_steps, 2);
  s.update(true);  // the 3rd backs off
  EXPECT_EQ(s.scale(), 32768.f);
  s.update(true);  // used up: every overflow backs off until a growth
  EXPECT_EQ(s.scale(), 16384.f);
  EXPECT_EQ(s.state().hysteresis_left, 1);
  s.update(false);  // a clean step alone does not refill
  EXPECT_EQ(s.state().hysteresis_left, 1);
  s.update(false);  // growth: refilled
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.state().hysteresis_left, 3);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.state().growth_tracker, 0);  // an absorbed overflow still resets the tracker
  s.update(true);
  EXPECT_EQ(s.scale(), 16384.f);
  EXPECT_EQ(s.state().skipped_steps, 7);
  EXPECT_EQ(s.state().overflows, 7);
}

TEST(GradScaler, ExtendedRuleMatchesModelOnRandomScripts) {
  uint64_t seed = 100;
  for (int64_t hysteresis : {1, 2, 4})
    for (double min_scale : {0.0, 1.0, 1000.0})
      for (double max_scale : {std::numeric_limits<double>::infinity(), 16777216.0, 100000.0}) {
        GradScalerConfig c = with_interval(3);
        c.hysteresis = hysteresis;
        c.min_scale = min_scale;
        c.max_scale = max_scale;
        c.init_scale = 4096.0;
        for (double p : {0.3, 0.05}) {  // drifting down to the floor / up to the cap
          GradScaler s(c);
          RefScaler r(c);
          int step = 0;
          for (bool inf : random_script(3000, p, seed++)) {
            s.update(inf);
            r.update(inf);
            expect_same(s, r, step++);
          }
        }
      }
}

TEST(GradScaler, MinScaleClampsAndReports) {
  GradScalerConfig c;
  c.init_scale = 4096;
  c.min_scale = 1024;
  GradScaler s(c);
  s.update(true);
  EXPECT_EQ(s.scale(), 2048.f);
  EXPECT_FALSE(s.hit_min_scale());
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.f);  // reached exactly: not clamped
  EXPECT_FALSE(s.hit_min_scale());
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_TRUE(s.hit_min_scale());
  s.update(false);
  EXPECT_FALSE(s.hit_min_scale());  // an event of the last update only
  // A floor that is not a power of two: clamped to it, never below.
  c.min_scale = 3000;
  GradScaler t(c);
  t.update(true);
  EXPECT_EQ(t.scale(), 3000.f);
  EXPECT_TRUE(t.hit_min_scale());
}

TEST(GradScaler, WithoutMinScaleTheScaleNeverReachesZero) {
  GradScalerConfig c;
  c.init_scale = 1.0;
  GradScaler s(c);
  bool hit = false;
  for (int i = 0; i < 200; ++i) {
    s.update(true);
    EXPECT_GT(s.scale(), 0.f);
    hit = hit || s.hit_min_scale();
  }
  EXPECT_TRUE(hit);
  EXPECT_EQ(s.scale(), std::numeric_limits<float>::denorm_min());
}

TEST(GradScaler, MaxScaleCapsGrowth) {
  GradScalerConfig c = with_interval(1);
  c.max_scale = 16777216.0;  // Apex's 2^24
  GradScaler s(c);
  for (int i = 0; i < 8; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 16777216.f);  // 2^16 -> 2^24 in 8 growths, the last one not yet cut
  EXPECT_FALSE(s.growth_capped());
  s.update(false);
  EXPECT_EQ(s.scale(), 16777216.f);
  EXPECT_TRUE(s.growth_capped());
  c.max_scale = 100000.0;  // not a power of two: grows to the cap (Apex's min(cap, 2 * scale))
  GradScaler t(c);
  t.update(false);
  EXPECT_EQ(t.scale(), 100000.f);
  EXPECT_TRUE(t.growth_capped());
}

TEST(GradScaler, StaticScaleNeverChanges) {
  GradScalerConfig c = with_interval(1);
  c.dynamic = false;
  c.init_scale = 128;
  GradScaler s(c);
  for (bool inf : random_script(100, 0.5, 7)) {
    s.update(inf);
    EXPECT_EQ(s.scale(), 128.f);
    EXPECT_EQ(s.state().growth_tracker, 0);
  }
  EXPECT_GT(s.state().overflows, 0);
  EXPECT_EQ(s.state().overflows, s.state().skipped_steps);
}

TEST(GradScaler, UnscaleMultipliesByTheFp32Reciprocal) {
  GradScalerConfig c;
  c.init_scale = 3.0;
  GradScaler s(c);
  ParameterStore store = small_store();
  fill_grads(store, 1);
  const std::vector<float> before = store.flat_grads().to_floats();
  EXPECT_FALSE(s.unscale(store));
  EXPECT_FALSE(s.step_should_skip());
  const std::vector<float> after = store.flat_grads().to_floats();
  const float inv = float(1.0 / 3.0);  // torch: scale.double().reciprocal().float()
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], before[i] * inv) << i;
  // The norm comes for free, the same bits as clip's.
  EXPECT_EQ(std::sqrt(s.grad_sum_squares()), grad_global_norm(store));
}

TEST(GradScaler, UnscaleFindsInfAndUpdateBacksOff) {
  GradScaler s;
  ParameterStore store = small_store();
  fill_grads(store, 1);
  store.grad("b").data<float>()[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(s.unscale(store));
  EXPECT_TRUE(s.step_should_skip());
  s.update();  // combines what unscale found
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.state().overflows, 1);
  // An external found_inf (e.g. another process) also counts.
  s.update(true);
  EXPECT_EQ(s.scale(), 16384.f);
}

TEST(GradScaler, DoubleUnscaleThrows) {
  GradScaler s;
  ParameterStore store = small_store();
  s.unscale(store);
  const std::string msg = expect_throw<ArgumentError>([&] { s.unscale(store); });
  EXPECT_NE(msg.find("already been called"), std::string::npos) << msg;
  expect_throw<ArgumentError>([&] { s.load_state(s.state()); });  // mid-iteration
  s.update();
  EXPECT_NO_THROW(s.unscale(store));  // a new iteration
}

TEST(GradScaler, ProtocolErrors) {
  GradScaler s;
  expect_throw<ArgumentError>([&] { (void)s.step_should_skip(); });
  expect_throw<ArgumentError>([&] { (void)s.grad_sum_squares(); });
  ParameterStore unfinished;
  unfinished.declare("w", {2}, true);
  expect_throw<ArgumentError>([&] { s.unscale(unfinished); });
}

TEST(GradScaler, RefusesNonF32Gradients) {
  for (DType dt : {DType::f16, DType::bf16}) {
    ParameterStore store;
    store.declare("w", {3, 5}, true);
    store.finalize(DType::f32, dt);
    GradScaler s;
    const std::string msg = expect_throw<DTypeError>([&] { s.unscale(store); });
    EXPECT_NE(msg.find("is refused"), std::string::npos) << msg;
  }
}

TEST(GradScaler, SeveralStoresInOneIteration) {
  GradScaler s(with_interval(1));
  ParameterStore a = small_store(), b = small_store();
  fill_grads(a, 1);
  fill_grads(b, 2);
  EXPECT_FALSE(s.unscale(a));
  EXPECT_FALSE(s.unscale(b));  // a distinct store: allowed
  const double na = grad_global_norm(a), nb = grad_global_norm(b);
  EXPECT_NEAR(s.grad_sum_squares(), na * na + nb * nb, 1e-6 * (na * na + nb * nb));
  expect_throw<ArgumentError>([&] { s.unscale(a); });
  s.update();
  EXPECT_EQ(s.scale(), 131072.f);  // one clean iteration, one growth

  fill_grads(a, 3);
  fill_grads(b, 4);
  b.grad("g").data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(s.unscale(a));
  EXPECT_TRUE(s.unscale(b));
  EXPECT_TRUE(s.step_should_skip());
  s.update();
  EXPECT_EQ(s.scale(), 65536.f);  // one backoff for the iteration, not one per store
  EXPECT_EQ(s.state().overflows, 1);
}

TEST(GradScaler, DisabledIsANoOp) {
  GradScalerConfig c = with_interval(1);
  c.enabled = false;
  GradScaler s(c);
  EXPECT_EQ(s.scale(), 1.f);
  ParameterStore store = small_store();
  fill_grads(store, 1);
  const std::vector<float> before = store.flat_grads().to_floats();
  EXPECT_FALSE(s.unscale(store));
  EXPECT_EQ(store.flat_grads().to_floats(), before);  // nothing multiplied
  s.update();
  store.grad("w").data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(s.unscale(store));  // still checks
  EXPECT_TRUE(s.step_should_skip());
  s.update();
  EXPECT_EQ(s.scale(), 1.f);
  EXPECT_EQ(s.state().scale, 65536.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.state().overflows, 0);
  EXPECT_EQ(s.state().skipped_steps, 1);  // the trainer skips non-finite steps without a scaler
}

TEST(GradScaler, StateRoundTripContinuesIdentically) {
  GradScalerConfig c = with_interval(4);
  c.hysteresis = 2;
  c.min_scale = 1;
  const std::vector<bool> script = random_script(2000, 0.2, 42);
  GradScaler a(c);
  for (size_t i = 0; i < 1000; ++i) a.update(script[i]);
  const GradScalerState saved = a.state();
  GradScaler b(c);
  b.load_state(saved);
  for (size_t i = 1000; i < script.size(); ++i) {
    a.update(script[i]);
    b.update(script[i]);
    ASSERT_EQ(a.state().scale, b.state().scale) << i;
    ASSERT_EQ(a.state().growth_tracker, b.state().growth_tracker) << i;
    ASSERT_EQ(a.state().hysteresis_left, b.state().hysteresis_left) << i;
    ASSERT_EQ(a.state().overflows, b.state().overflows) << i;
    ASSERT_EQ(a.state().skipped_steps, b.state().skipped_steps) << i;
    ASSERT_EQ(a.hit_min_scale(), b.hit_min_scale()) << i;
  }
}

TEST(GradScaler, LoadStateValidates) {
  GradScalerConfig c = with_interval(4);
  c.hysteresis = 2;
  GradScaler s(c);
  const GradScalerState good = s.state();
  auto with = [&](auto edit) {
    GradScalerState st = good;
    edit(st);
    return st;
  };
  expect_throw<ArgumentError>([&] { s.load_state(with([](GradScalerState& t) { t.scale = 0; })); });
  expect_throw<ArgumentError>(
      [&] { s.load_state(with([](GradScalerState& t) { t.scale = 0.1; })); });  // not fp32
  expect_throw<ArgumentError>([&] {
    s.load_state(with([](GradScalerState& t) { t.scale = std::numeric_limits<double>::infinity(); }));
  });
  expect_throw<ArgumentError>([&] { s.load_state(with([](GradScalerState& t) { t.growth_tracker = 4; })); });
  expect_throw<ArgumentError>([&] { s.load_state(with([](GradScalerState& t) { t.hysteresis_left = 3; })); });
  expect_throw<ArgumentError>([&] { s.load_state(with([](GradScalerState& t) { t.hysteresis_left = 0; })); });
  expect_throw<ArgumentError>([&] { s.load_state(with([](GradScalerState& t) { t.overflows = -1; })); });
  EXPECT_NO_THROW(s.load_state(with([](GradScalerState& t) { t.scale = 0.5; })));
  EXPECT_EQ(s.scale(), 0.5f);
}

TEST(GradScaler, ConfigValidation) {
  auto bad = [](auto edit) {
    GradScalerConfig c;
    edit(c);
    return expect_throw<ArgumentError>([&] { GradScaler s(c); });
  };
  EXPECT_NE(bad([](GradScalerConfig& c) { c.growth_factor = 1.0; }).find("growth_factor"), std::string::npos);
  bad([](GradScalerConfig& c) { c.growth_factor = std::nan(""); });
  EXPECT_NE(bad([](GradScalerConfig& c) { c.backoff_factor = 1.0; }).find("backoff_factor"),
            std::string::npos);
  bad([](GradScalerConfig& c) { c.backoff_factor = 0.0; });
  bad([](GradScalerConfig& c) { c.growth_interval = 0; });
  bad([](GradScalerConfig& c) { c.hysteresis = 0; });
  bad([](GradScalerConfig& c) { c.init_scale = 0; });
  bad([](GradScalerConfig& c) { c.init_scale = -1; });
  bad([](GradScalerConfig& c) { c.init_scale = 1e39; });  // inf in fp32
  bad([](GradScalerConfig& c) { c.init_scale = std::numeric_limits<double>::infinity(); });
  bad([](GradScalerConfig& c) { c.min_scale = -1; });
  bad([](GradScalerConfig& c) { c.max_scale = 0; });
  bad([](GradScalerConfig& c) {
    c.min_scale = 10;
    c.max_scale = 5;
  });
  bad([](GradScalerConfig& c) { c.max_scale = 1024; });  // init_scale above the cap
  bad([](GradScalerConfig& c) {
    c.init_scale = 1e-4;
    c.min_scale = 1e-4;
    c.max_scale = 1e-4;  // no fp32 value equals 1e-4
  });
  EXPECT_NO_THROW(GradScaler(GradScalerConfig{}));
}

}  // namespace
}  // namespace mixtrain
