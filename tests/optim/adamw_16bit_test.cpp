// AdamW on 16-bit stores (the *-true modes): for bf16 and f16 and each UpdateRounding, the fast
// kernel against the scalar reference bit for bit and across thread counts; one step against the
// update written out in double and then rounded; stochastic rounding's determinism; which buffers
// each choice allocates (state_bytes); dtype errors; the storage-version bump.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mixtrain/optim/adamw.h"
#include "optim/flat_spans.h"
#include "optim/lowp_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

struct Case {
  DType dtype;
  UpdateRounding rounding;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.dtype)) + "_" +
         std::string(update_rounding_name(info.param.rounding));
}
const Case kCases[] = {
    {DType::bf16, UpdateRounding::nearest},   {DType::bf16, UpdateRounding::stochastic},
    {DType::bf16, UpdateRounding::kahan},     {DType::f16, UpdateRounding::nearest},
    {DType::f16, UpdateRounding::stochastic}, {DType::f16, UpdateRounding::kahan},
};

AdamWConfig config_for(UpdateRounding r, uint64_t seed = 42) {
  AdamWConfig c;
  c.lr = 3e-3f;  // some updates above half an ulp of the parameter, many below
  c.weight_decay = 0.1f;
  c.rounding = r;
  c.seed = seed;
  return c;
}

// Four AdamW steps on big_store in the given mode; every buffer's bytes afterwards.
Snapshot run_adamw(const Case& k, bool reference, int threads, uint64_t seed = 42) {
  RunMode mode(reference, threads);
  ParameterStore s = big_store(k.dtype, k.dtype);
  fill_params(s);
  AdamW opt(s, config_for(k.rounding, seed));
  for (int t = 1; t <= 4; ++t) {
    fill_grads(s, t);
    opt.step(s);
  }
  return {raw_bytes(s.flat_params()), raw_bytes(opt.exp_avg()), raw_bytes(opt.exp_avg_sq()),
          raw_bytes(opt.compensation())};
}

class AdamW16Bit : public ::testing::TestWithParam<Case> {};

TEST_P(AdamW16Bit, FastMatchesReferenceBitForBitAnyThreadCount) {
  const Case k = GetParam();
  const Snapshot ref = run_adamw(k, true, 1);
  EXPECT_EQ(ref.c.empty(), k.rounding != UpdateRounding::kahan);
  for (int threads : {1, 2, 3}) EXPECT_TRUE(run_adamw(k, false, threads) == ref) << threads << " threads";
  // The reference itself does not depend on the thread count either (it is serial).
  EXPECT_TRUE(run_adamw(k, true, 3) == ref);
}

// One step from zero moments, written out in double (torch's formulas, as in adamw_test.cpp) on
// the 16-bit inputs, then rounded: nearest must give the nearest 16-bit value (up to the fp32
// kernel's own rounding, `slack`), stochastic one of the two neighbours, kahan the nearest value
// plus a compensation equal to what rounding dropped.
TEST_P(AdamW16Bit, OneStepMatchesDoubleThenRounded) {
  const Case k = GetParam();
  ParameterStore s = small_store(k.dtype, k.dtype);
  fill_params(s);
  fill_grads(s, 1);
  const AdamWConfig c = config_for(k.rounding);
  const std::vector<float> p0 = s.flat_params().to_floats(), g0 = s.flat_grads().to_floats();
  AdamW opt(s, c);
  opt.step(s);
  const double lr = c.lr, b1 = c.beta1, b2 = c.beta2, wd = c.weight_decay, eps = c.eps;
  const double eps32 = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < s.flat_numel(); ++i) {
    const ParamInfo* o = owner(s, i);
    if (!o) {  // padding stays zero
      EXPECT_EQ(get_flat(s.flat_params(), i), 0.f);
      continue;
    }
    const double p = p0[size_t(i)], g = g0[size_t(i)];
    const double m = (1 - b1) * g, v = (1 - b2) * g * g;
    const double pd = o->weight_decay ? p * (1 - lr * wd) : p;
    const double upd = -(lr / (1 - b1)) * m / (std::sqrt(v) / std::sqrt(1 - b2) + eps);
    const double x = pd + upd;
    // fp32 rounding in the kernel: a few ulps of each term (and of the rounded scalars).
    const double slack = 8 * eps32 * (std::abs(p) + std::abs(upd));
    EXPECT_TRUE(is_nearest(k.dtype, lowp_bits(opt.exp_avg(), i), m, 4 * eps32 * std::abs(m)))
        << "m[" << i << "]";
    EXPECT_TRUE(is_nearest(k.dtype, lowp_bits(opt.exp_avg_sq(), i), v, 4 * eps32 * v)) << "v[" << i << "]";
    const uint16_t got = lowp_bits(s.flat_params(), i);
    if (k.rounding == UpdateRounding::stochastic) {
      EXPECT_TRUE(brackets(k.dtype, got, x, slack)) << "p[" << i << "]";
    } else {
      EXPECT_TRUE(is_nearest(k.dtype, got, x, slack)) << "p[" << i << "]";
    }
    if (k.rounding == UpdateRounding::kahan) {
      // c = rn(x - p'), the part of the update the 16-bit parameter could not hold.
      const double residual = x - lowp_value(k.dtype, got);
      const double cval = get_flat(opt.compensation(), i);
      EXPECT_NEAR(cval, residual, dtype_epsilon(k.dtype) * std::abs(residual) + slack + std::ldexp(1.0, -24))
          << "c[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AdamW16Bit, ::testing::ValuesIn(kCases), case_name);

TEST(AdamW16BitStochastic, DeterministicForASeedAndSeedDependent) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const Case k{dt, UpdateRounding::stochastic};
    const Snapshot a = run_adamw(k, false, 2, 7), b = run_adamw(k, false, 1, 7),
                   c = run_adamw(k, false, 2, 8);
    EXPECT_TRUE(a == b);
    EXPECT_NE(a.p, c.p);    // another stream rounds some elements the other way
    EXPECT_EQ(a.s0, c.s0);  // m and v are rounded to nearest, independent of the seed
    EXPECT_EQ(a.s1, c.s1);
    // And it is not nearest rounding in disguise.
    EXPECT_NE(a.p, run_adamw({dt, UpdateRounding::nearest}, false, 2).p);
  }
}

TEST(AdamW16BitState, CompensationOnlyForKahanAndStateBytes) {
  for (DType dt : {DType::bf16, DType::f16}) {
    ParameterStore s = small_store(dt, dt);
    const int64_t n = s.flat_numel();
    for (UpdateRounding r : {UpdateRounding::nearest, UpdateRounding::stochastic, UpdateRounding::kahan}) {
      AdamW opt(s, config_for(r));
      EXPECT_EQ(opt.param_dtype(), dt);
      EXPECT_EQ(opt.exp_avg().dtype(), dt);
      EXPECT_EQ(opt.exp_avg_sq().dtype(), dt);
      EXPECT_EQ(opt.exp_avg().category(), MemCategory::optimizer_state);
      const bool kahan = r == UpdateRounding::kahan;
      EXPECT_EQ(opt.compensation().defined(), kahan);
      if (kahan) {
        EXPECT_EQ(opt.compensation().dtype(), dt);
        EXPECT_EQ(opt.compensation().category(), MemCategory::optimizer_state);
      }
      // m + v: 2 + 2 bytes per element; the compensation 2 more.
      EXPECT_EQ(opt.state_bytes(), (kahan ? 6 : 4) * n);
    }
  }
  // fp32 store: 8 bytes per element whatever the rounding says (it is ignored).
  ParameterStore f = small_store();
  for (UpdateRounding r : {UpdateRounding::nearest, UpdateRounding::kahan}) {
    AdamW opt(f, config_for(r));
    EXPECT_FALSE(opt.compensation().defined());
    EXPECT_EQ(opt.state_bytes(), 8 * f.flat_numel());
  }
}

TEST(AdamW16BitState, SetStateRestoresCompensation) {
  ParameterStore a = small_store(DType::bf16, DType::bf16), b = small_store(DType::bf16, DType::bf16);
  fill_params(a);
  fill_params(b);
  AdamW oa(a, config_for(UpdateRounding::kahan)), ob(b, config_for(UpdateRounding::kahan));
  for (int t = 1; t <= 2; ++t) fill_grads(a, t), oa.step(a);
  Tensor bp = b.flat_params();
  bp.copy_from(a.flat_params());
  ob.set_state(oa.steps(), oa.exp_avg(), oa.exp_avg_sq(), oa.compensation());
  fill_grads(a, 3), oa.step(a);
  fill_grads(b, 3), ob.step(b);
  EXPECT_EQ(raw_bytes(a.flat_params()), raw_bytes(b.flat_params()));
  EXPECT_EQ(raw_bytes(oa.compensation()), raw_bytes(ob.compensation()));
  ob.set_state(0, oa.exp_avg(), oa.exp_avg_sq());  // no compensation given: reset to zero
  for (float x : ob.compensation().to_floats()) EXPECT_EQ(x, 0.f);
}

TEST(AdamW16BitErrors, MismatchedDtypes) {
  // bf16 parameters with f32 gradients: the optimizer builds (bf16 state), the step refuses.
  ParameterStore mixed = small_store(DType::bf16, DType::f32);
  AdamW o1(mixed);
  std::string msg = expect_throw<DTypeError>([&] { o1.step(mixed); });
  EXPECT_NE(msg.find("gradients must be bf16"), std::string::npos) << msg;
  // f32 parameters with bf16 gradients.
  ParameterStore mixed2 = small_store(DType::f32, DType::bf16);
  AdamW o2(mixed2);
  expect_throw<DTypeError>([&] { o2.step(mixed2); });
  // bf16 parameters with f16 gradients.
  ParameterStore mixed3 = small_store(DType::bf16, DType::f16);
  AdamW o3(mixed3);
  expect_throw<DTypeError>([&] { o3.step(mixed3); });
  // Built for bf16, stepped on an f16 store of the same layout.
  ParameterStore b16 = small_store(DType::bf16, DType::bf16), f16 = small_store(DType::f16, DType::f16);
  AdamW o4(b16);
  msg = expect_throw<DTypeError>([&] { o4.step(f16); });
  EXPECT_NE(msg.find("parameters must be bf16"), std::string::npos) << msg;
  // fp8 parameters are not an optimizer dtype.
  ParameterStore f8 = small_store(DType::f8_e4m3, DType::f8_e4m3);
  expect_throw<DTypeError>([&] { AdamW o(f8); });
  // The 16-bit kernel refuses kahan without a compensation buffer.
  ParameterStore s = small_store(DType::bf16, DType::bf16);
  const std::vector<FlatSpan> spans = flat_spans(s);
  Tensor m = Tensor::zeros({s.flat_numel()}, DType::bf16), v = Tensor::zeros({s.flat_numel()}, DType::bf16);
  const AdamWScalars sc = adamw_scalars(AdamWConfig{}, 1e-3f, 1);
  expect_throw<ArgumentError>([&] {
    adamw_update(s.flat_params().data<bf16>(), s.flat_grads().data<bf16>(), m.data<bf16>(), v.data<bf16>(),
                 nullptr, spans, sc, LowpWrite{UpdateRounding::kahan, 0, 0});
  });
}

TEST(AdamWVersion, EveryStepBumpsTheParameterStorageVersion) {
  for (DType dt : {DType::f32, DType::bf16}) {
    ParameterStore s = small_store(dt, dt);
    fill_params(s);
    AdamW opt(s);
    const uint64_t v0 = s.flat_params().storage()->version();
    fill_grads(s, 1);
    opt.step(s);
    EXPECT_EQ(s.flat_params().storage()->version(), v0 + 1);
    opt.step(s, 0.f);  // even a step that changes nothing: the cache must not reason about values
    EXPECT_EQ(s.flat_params().storage()->version(), v0 + 2);
    // Views of the parameters share the storage, so they see the bump.
    EXPECT_EQ(s.param(0).storage()->version(), v0 + 2);
  }
}

}  // namespace
}  // namespace mixtrain
