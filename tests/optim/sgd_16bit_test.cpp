// SGD on 16-bit stores (the *-true modes): for bf16 and f16 and each UpdateRounding, with and
// without momentum, the fast kernel against the scalar reference bit for bit and across thread
// counts; one step against the update written out in double; buffers and state_bytes; dtype
// errors; the storage-version bump.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mixtrain/optim/sgd.h"
#include "optim/lowp_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

struct Case {
  DType dtype;
  UpdateRounding rounding;
  float momentum;
  bool nesterov;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_" + std::string(update_rounding_name(c.rounding)) +
         (c.momentum == 0.f ? "_plain"
          : c.nesterov      ? "_nesterov"
                            : "_momentum");
}
std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (DType d : {DType::bf16, DType::f16})
    for (UpdateRounding r : {UpdateRounding::nearest, UpdateRounding::stochastic, UpdateRounding::kahan}) {
      v.push_back({d, r, 0.f, false});
      v.push_back({d, r, 0.9f, false});
      v.push_back({d, r, 0.9f, true});
    }
  return v;
}

SgdConfig config_for(const Case& k, uint64_t seed = 5) {
  SgdConfig c;
  c.lr = 2e-2f;
  c.momentum = k.momentum;
  c.nesterov = k.nesterov;
  c.weight_decay = 0.05f;
  c.rounding = k.rounding;
  c.seed = seed;
  return c;
}

Snapshot run_sgd(const Case& k, bool reference, int threads, uint64_t seed = 5) {
  RunMode mode(reference, threads);
  ParameterStore s = big_store(k.dtype, k.dtype);
  fill_params(s);
  SGD opt(s, config_for(k, seed));
  for (int t = 1; t <= 4; ++t) {
    fill_grads(s, t);
    opt.step(s);
  }
  return {raw_bytes(s.flat_params()), raw_bytes(opt.momentum_buffer()), {}, raw_bytes(opt.compensation())};
}

class SGD16Bit : public ::testing::TestWithParam<Case> {};

TEST_P(SGD16Bit, FastMatchesReferenceBitForBitAnyThreadCount) {
  const Case k = GetParam();
  const Snapshot ref = run_sgd(k, true, 1);
  EXPECT_EQ(ref.s0.empty(), k.momentum == 0.f);
  EXPECT_EQ(ref.c.empty(), k.rounding != UpdateRounding::kahan);
  for (int threads : {1, 2, 3}) EXPECT_TRUE(run_sgd(k, false, threads) == ref) << threads << " threads";
}

// First step in double on the 16-bit inputs: d = g + wd*p (decayed spans); buf = d;
// d = nesterov ? d + mom*buf : buf; p' = p - lr*d; then rounded.
TEST_P(SGD16Bit, OneStepMatchesDoubleThenRounded) {
  const Case k = GetParam();
  ParameterStore s = small_store(k.dtype, k.dtype);
  fill_params(s);
  fill_grads(s, 1);
  const SgdConfig c = config_for(k);
  const std::vector<float> p0 = s.flat_params().to_floats(), g0 = s.flat_grads().to_floats();
  SGD opt(s, c);
  opt.step(s);
  const double eps32 = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < s.flat_numel(); ++i) {
    const ParamInfo* o = owner(s, i);
    if (!o) continue;
    const double p = p0[size_t(i)], g = g0[size_t(i)];
    double d = o->weight_decay ? g + double(c.weight_decay) * p : g;
    const double buf = d;
    if (c.momentum != 0.f && c.nesterov) d = d + double(c.momentum) * buf;
    const double upd = -double(c.lr) * d, x = p + upd;
    const double slack = 8 * eps32 * (std::abs(p) + std::abs(upd));
    if (c.momentum != 0.f) {
      EXPECT_TRUE(is_nearest(k.dtype, lowp_bits(opt.momentum_buffer(), i), buf, 4 * eps32 * std::abs(buf)));
    }
    const uint16_t got = lowp_bits(s.flat_params(), i);
    if (k.rounding == UpdateRounding::stochastic)
      EXPECT_TRUE(brackets(k.dtype, got, x, slack)) << "p[" << i << "]";
    else
      EXPECT_TRUE(is_nearest(k.dtype, got, x, slack)) << "p[" << i << "]";
    if (k.rounding == UpdateRounding::kahan) {
      const double residual = x - lowp_value(k.dtype, got);
      EXPECT_NEAR(get_flat(opt.compensation(), i), residual,
                  dtype_epsilon(k.dtype) * std::abs(residual) + slack + std::ldexp(1.0, -24));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SGD16Bit, ::testing::ValuesIn(all_cases()), case_name);

TEST(SGD16BitStochastic, DeterministicForASeedAndSeedDependent) {
  const Case k{DType::bf16, UpdateRounding::stochastic, 0.9f, false};
  const Snapshot a = run_sgd(k, false, 2, 11), b = run_sgd(k, false, 1, 11), c = run_sgd(k, false, 2, 12);
  EXPECT_TRUE(a == b);
  EXPECT_NE(a.p, c.p);
}

TEST(SGD16BitState, BuffersAndStateBytes) {
  for (DType dt : {DType::bf16, DType::f16}) {
    ParameterStore s = small_store(dt, dt);
    const int64_t n = s.flat_numel();
    for (UpdateRounding r : {UpdateRounding::nearest, UpdateRounding::stochastic, UpdateRounding::kahan})
      for (float mom : {0.f, 0.9f}) {
        SGD opt(s, config_for({dt, r, mom, false}));
        const bool kahan = r == UpdateRounding::kahan;
        EXPECT_EQ(opt.momentum_buffer().defined(), mom != 0.f);
        if (mom != 0.f) {
          EXPECT_EQ(opt.momentum_buffer().dtype(), dt);
        }
        EXPECT_EQ(opt.compensation().defined(), kahan);
        EXPECT_EQ(opt.state_bytes(), ((mom != 0.f ? 2 : 0) + (kahan ? 2 : 0)) * n);
      }
  }
  ParameterStore f = small_store();
  EXPECT_EQ(SGD(f, config_for({DType::f32, UpdateRounding::kahan, 0.9f, false})).state_bytes(),
            4 * f.flat_numel());
  EXPECT_EQ(SGD(f, config_for({DType::f32, UpdateRounding::kahan, 0.f, false})).state_bytes(), 0);
}

TEST(SGD16BitErrors, MismatchedDtypes) {
  ParameterStore mixed = small_store(DType::bf16, DType::f32);
  SGD o1(mixed);
  expect_throw<DTypeError>([&] { o1.step(mixed); });
  ParameterStore mixed2 = small_store(DType::f16, DType::bf16);
  SGD o2(mixed2);
  expect_throw<DTypeError>([&] { o2.step(mixed2); });
  ParameterStore f16 = small_store(DType::f16, DType::f16), b16 = small_store(DType::bf16, DType::bf16);
  SGD o3(f16);
  expect_throw<DTypeError>([&] { o3.step(b16); });
}

TEST(SGDVersion, EveryStepBumpsTheParameterStorageVersion) {
  for (DType dt : {DType::f32, DType::f16}) {
    ParameterStore s = small_store(dt, dt);
    SGD opt(s);
    const uint64_t v0 = s.flat_params().storage()->version();
    opt.step(s);
    opt.step(s);
    EXPECT_EQ(s.flat_params().storage()->version(), v0 + 2);
  }
}

}  // namespace
}  // namespace mixtrain
