// AdamW: against torch.optim.AdamW's formulas written out in double, the fast kernel against the
// scalar reference (bit for bit), thread-count independence, state restore and config errors.
#include "mixtrain/optim/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "mixtrain/core/cpu_features.h"
#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

// torch.optim.AdamW (single-tensor path), in double:
//   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p -= lr / (1 - b1^t) * m / denom
struct AdamWDouble {
  std::vector<double> p, m, v;
  // Error-analysis magnitudes: the same recurrences over absolute values. Where terms of
  // opposite sign cancel, fp32 rounding errors are relative to these, not to the result.
  std::vector<double> p_mag, m_mag;
  void step(const std::vector<double>& g, const std::vector<bool>& decay, const AdamWConfig& c, double lr,
            int t) {
    const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, wd = c.weight_decay;
    for (size_t i = 0; i < p.size(); ++i) {
      if (decay[i]) p[i] *= 1 - lr * wd, p_mag[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      m_mag[i] = b1 * m_mag[i] + (1 - b1) * std::abs(g[i]);
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / denom;
      p_mag[i] += lr / (1 - std::pow(b1, t)) * m_mag[i] / denom;
    }
  }
};

// Runs `steps` AdamW steps on small_store() in fp32 and in double; compares every element with a
// tolerance of 8 fp32 ulps of the error-analysis magnitude (rounding of p, m, v at each step
// accumulates; m and p can cancel, so the bound is relative to |terms|, not to the result).
void check_against_double(const AdamWConfig& cfg, const std::vector<float>& lrs) {
  ParameterStore s = small_store();
  fill_params(s);
  AdamW opt(s, cfg);
  const int64_t n = s.flat_numel();
  AdamWDouble ref;
  std::vector<bool> decay(size_t(n), false), inside(size_t(n), false);
  for (int64_t i = 0; i < n; ++i) {
    const ParamInfo* o = owner(s, i);
    inside[size_t(i)] = o != nullptr;
    decay[size_t(i)] = o && o->weight_decay;
    ref.p.push_back(o ? double(float(param_value(i))) : 0.0);
  }
  for (double x : ref.p) ref.p_mag.push_back(std::abs(x));
  ref.m.assign(size_t(n), 0.0);
  ref.v.assign(size_t(n), 0.0);
  ref.m_mag.assign(size_t(n), 0.0);
  for (size_t k = 0; k < lrs.size(); ++k) {
    const int t = int(k) + 1;
    fill_grads(s, t);
    std::vector<double> g(size_t(n), 0.0);
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = inside[size_t(i)] ? double(float(grad_value(i, t))) : 0.0;
    opt.step(s, lrs[k]);
    ref.step(g, decay, cfg, lrs[k], t);
    EXPECT_EQ(opt.steps(), t);
    const float* p = s.flat_params().data<float>();
    const float* m = opt.exp_avg().data<float>();
    const float* v = opt.exp_avg_sq().data<float>();
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t u = size_t(i);
      if (!inside[u]) {  // padding: never touched
        EXPECT_EQ(p[i], 0.f);
        EXPECT_EQ(m[i], 0.f);
        EXPECT_EQ(v[i], 0.f);
        continue;
      }
      // 8 ulps: p, m and v each round once per operation, over a handful of steps.
      const double tol_p = 8 * FLT_EPSILON * ref.p_mag[u] + 1e-12;
      EXPECT_NEAR(p[i], ref.p[u], tol_p) << "step " << t << " element " << i;
      EXPECT_NEAR(m[i], ref.m[u], 8 * FLT_EPSILON * ref.m_mag[u] + 1e-12) << "m, element " << i;
      EXPECT_NEAR(v[i], ref.v[u], 8 * FLT_EPSILON * std::abs(ref.v[u]) + 1e-15) << "v, element " << i;
      worst = std::max(worst, std::abs(p[i] - ref.p[u]) / tol_p);
    }
    EXPECT_LE(worst, 1.0);
  }
}

TEST(AdamW, MatchesTorchFormulasInDouble) {
  AdamWConfig cfg;  // torch defaults
  EXPECT_FLOAT_EQ(cfg.lr, 1e-3f);
  EXPECT_FLOAT_EQ(cfg.beta1, 0.9f);
  EXPECT_FLOAT_EQ(cfg.beta2, 0.999f);
  EXPECT_FLOAT_EQ(cfg.eps, 1e-8f);
  EXPECT_FLOAT_EQ(cfg.weight_decay, 1e-2f);
  check_against_double(cfg, {1e-3f, 1e-3f, 1e-3f, 1e-3f, 1e-3f});
}

TEST(AdamW, MatchesTorchFormulasLargeLrAndDecay) {
  // Large lr and wd so the decay and bias corrections move p well beyond rounding.
  AdamWConfig cfg{0.f, 0.8f, 0.95f, 1e-6f, 0.1f};
  check_against_double(cfg, {0.05f, 0.1f, 0.1f, 0.07f, 0.02f, 0.1f});
}

TEST(AdamW, MatchesTorchFormulasSmallBeta1) {
  // beta1 < 0.5: the lerp weight 1 - beta1 >= 0.5 takes torch's other lerp branch.
  AdamWConfig cfg{0.f, 0.3f, 0.99f, 1e-8f, 0.0f};
  check_against_double(cfg, {0.01f, 0.01f, 0.01f, 0.01f});
}

TEST(AdamW, FirstStepIsSignTimesLr) {
  // At t = 1 the bias-corrected update is lr * g / (|g| + eps): about lr * sign(g).
  ParameterStore s = small_store();
  AdamW opt(s, AdamWConfig{0.f, 0.9f, 0.999f, 1e-8f, 0.f});
  fill_grads(s, 1);
  opt.step(s, 0.5f);
  const float* p = s.flat_params().data<float>();
  const float* g = s.flat_grads().data<float>();
  for (const ParamInfo& info : s.infos())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i)
      EXPECT_NEAR(p[i], -0.5 * g[i] / (std::abs(double(g[i])) + 1e-8), 1e-6) << i;
}

TEST(AdamW, DecayOnlyWhereFlagged) {
  // Zero gradients: only the decoupled decay moves p, and only on weight_decay parameters.
  ParameterStore s = small_store();
  fill_params(s);
  AdamW opt(s, AdamWConfig{0.f, 0.9f, 0.999f, 1e-8f, 0.5f});
  opt.step(s, 0.1f);
  const float factor = float(1.0 - 0.1f * double(0.5f));
  for (const ParamInfo& info : s.infos()) {
    const std::vector<float> p = s.param(s.index(info.name)).to_floats();
    for (int64_t i = 0; i < info.numel; ++i) {
      const float p0 = float(param_value(info.offset + i));
      EXPECT_EQ(p[size_t(i)], info.weight_decay ? p0 * factor : p0) << info.name << " " << i;
    }
  }
}

// A large flat buffer with many spans of random lengths (1 .. 40000), random decay flags and
// gaps between them; random p, g and (after a warm-up) m, v.
struct BigCase {
  std::vector<FlatSpan> spans;
  std::vector<float> p, g, m, v;
  explicit BigCase(uint64_t seed) {
    std::mt19937_64 rng(seed);
    int64_t off = 0;
    while (off < 3'000'000) {
      const int64_t len = 1 + int64_t(rng() % (rng() % 4 == 0 ? 40000 : 300));
      spans.push_back({off, len, rng() % 2 == 0});
      off += len + int64_t(rng() % 20);
    }
    std::normal_distribution<float> nd(0.f, 1.f);
    p.resize(size_t(off));
    g.resize(size_t(off));
    m.resize(size_t(off));
    v.resize(size_t(off));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = nd(rng);
      g[i] = nd(rng) * 1e-2f;
      m[i] = nd(rng) * 1e-2f;
      v[i] = std::abs(nd(rng)) * 1e-4f;
    }
    g[17] = 0.f;  // zero gradient, and tiny ones (subnormal squares)
    g[18] = 1e-30f;
    g[19] = -3e-20f;
  }
};

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && diffs++ == 0) first = i;
  EXPECT_EQ(diffs, 0u) << what << ": first difference at " << first << ": " << a[first] << " vs " << b[first];
}

TEST(AdamW, FastKernelBitIdenticalToReference) {
  for (const AdamWConfig& cfg : {AdamWConfig{}, AdamWConfig{0.f, 0.3f, 0.95f, 1e-6f, 0.1f}}) {
    BigCase a(42);
    BigCase b = a;
    for (int t = 1; t <= 3; ++t) {
      const AdamWScalars s = adamw_scalars(cfg, 3e-3f, t);
      adamw_update_ref(a.p.data(), a.g.data(), a.m.data(), a.v.data(), a.spans, s);
      adamw_update(b.p.data(), b.g.data(), b.m.data(), b.v.data(), b.spans, s);
    }
    expect_bitwise_equal(a.p, b.p, "p");
    expect_bitwise_equal(a.m, b.m, "m");
    expect_bitwise_equal(a.v, b.v, "v");
    // Gap elements are outside every span: untouched.
    BigCase fresh(42);
    int checked = 0;
    for (size_t k = 0; k + 1 < b.spans.size(); ++k) {
      const int64_t gap = b.spans[k].offset + b.spans[k].numel;
      if (gap < b.spans[k + 1].offset) {
        EXPECT_EQ(b.p[size_t(gap)], fresh.p[size_t(gap)]);
        EXPECT_EQ(b.m[size_t(gap)], fresh.m[size_t(gap)]);
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(AdamW, ThreadCountIndependent) {
  const int saved = omp_get_max_threads();
  BigCase one(7);
  BigCase two = one;
  const AdamWScalars s = adamw_scalars(AdamWConfig{}, 1e-3f, 5);
  omp_set_num_threads(1);
  adamw_update(one.p.data(), one.g.data(), one.m.data(), one.v.data(), one.spans, s);
  omp_set_num_threads(2);
  adamw_update(two.p.data(), two.g.data(), two.m.data(), two.v.data(), two.spans, s);
  omp_set_num_threads(saved);
  expect_bitwise_equal(one.p, two.p, "p");
  expect_bitwise_equal(one.m, two.m, "m");
  expect_bitwise_equal(one.v, two.v, "v");
}

TEST(AdamW, ForceReferenceGivesSameResult) {
  ParameterStore a = small_store(), b = small_store();
  fill_params(a);
  fill_params(b);
  AdamW oa(a), ob(b);
  for (int t = 1; t <= 3; ++t) {
    fill_grads(a, t);
    fill_grads(b, t);
    oa.step(a, 0.01f);
    set_force_reference(true);
    ob.step(b, 0.01f);
    set_force_reference(false);
  }
  EXPECT_EQ(a.flat_params().to_floats(), b.flat_params().to_floats());
}

TEST(AdamW, StateRestoreContinuesIdentically) {
  ParameterStore a = small_store();
  fill_params(a);
  AdamW oa(a);
  for (int t = 1; t <= 2; ++t) {
    fill_grads(a, t);
    oa.step(a, 0.01f);
  }
  // "Checkpoint": copy parameters and state into a fresh store and optimizer.
  ParameterStore b = small_store();
  Tensor(b.flat_params()).copy_from(a.flat_params());
  AdamW ob(b);
  ob.set_state(oa.steps(), oa.exp_avg().clone(), oa.exp_avg_sq().clone());
  EXPECT_EQ(ob.steps(), 2);
  EXPECT_EQ(ob.exp_avg().category(), MemCategory::optimizer_state);
  fill_grads(a, 3);
  fill_grads(b, 3);
  oa.step(a, 0.01f);
  ob.step(b, 0.01f);
  EXPECT_EQ(a.flat_params().to_floats(), b.flat_params().to_floats());
  EXPECT_EQ(oa.exp_avg_sq().to_floats(), ob.exp_avg_sq().to_floats());

  expect_throw<ShapeError>([&] { ob.set_state(1, Tensor::zeros({3}, DType::f32), oa.exp_avg_sq()); });
  expect_throw<ArgumentError>([&] { ob.set_state(-1, oa.exp_avg(), oa.exp_avg_sq()); });
}

TEST(AdamW, StateIsFlatF32OptimizerState) {
  ParameterStore s = small_store();
  AdamW opt(s);
  EXPECT_EQ(opt.exp_avg().shape(), Shape{s.flat_numel()});
  EXPECT_EQ(opt.exp_avg().dtype(), DType::f32);
  EXPECT_EQ(opt.exp_avg_sq().category(), MemCategory::optimizer_state);
  EXPECT_EQ(opt.steps(), 0);
}

TEST(AdamW, BadConfigThrowsArgumentError) {
  ParameterStore s = small_store();
  const auto bad = [&](AdamWConfig c, const char* needle) {
    const std::string msg = expect_throw<ArgumentError>([&] { AdamW opt(s, c); });
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  };
  bad({-1e-3f, 0.9f, 0.999f, 1e-8f, 0.f}, "lr");
  bad({NAN, 0.9f, 0.999f, 1e-8f, 0.f}, "lr");
  bad({1e-3f, 1.0f, 0.999f, 1e-8f, 0.f}, "beta1");
  bad({1e-3f, -0.1f, 0.999f, 1e-8f, 0.f}, "beta1");
  bad({1e-3f, 0.9f, 1.0f, 1e-8f, 0.f}, "beta2");
  bad({1e-3f, 0.9f, 0.999f, 0.f, 0.f}, "eps");
  bad({1e-3f, 0.9f, 0.999f, -1e-8f, 0.f}, "eps");
  bad({1e-3f, 0.9f, 0.999f, 1e-8f, -0.1f}, "weight_decay");
  AdamW opt(s);
  expect_throw<ArgumentError>([&] { opt.step(s, -1.f); });
  EXPECT_EQ(opt.steps(), 0);  // a rejected step changes nothing
}

TEST(AdamW, WrongStoreThrows) {
  ParameterStore s = small_store();
  AdamW opt(s);
  ParameterStore other;
  other.declare("x", {100}, true);
  other.finalize(DType::f32, DType::f32);
  expect_throw<ArgumentError>([&] { opt.step(other, 1e-3f); });
  ParameterStore half = small_store(DType::bf16);
  AdamW opt16(half);
  expect_throw<DTypeError>([&] { opt16.step(half, 1e-3f); });
  ParameterStore unfinished;
  unfinished.declare("x", {4}, true);
  expect_throw<ArgumentError>([&] { AdamW o(unfinished); });
}

}  // namespace
}  // namespace mixtrain
