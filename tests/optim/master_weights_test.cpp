// Master rounding (optim/master_weights.h): a 16-bit store whose optimizer keeps fp32 master
// weights and fp32 state. Every step must be, bit for bit, the fp32 optimizer's step on a twin
// fp32 store holding the same (exactly widened) weights and gradients, with the 16-bit weights
// the master rounded to nearest; from the fast kernels and the references alike. Also: the state
// round trip, restore's refusals, and the kernels' refusals of a wrong call.
#include "mixtrain/optim/master_weights.h"

#include <gtest/gtest.h>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/sgd.h"
#include "optim/lowp_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

// A 16-bit store and its fp32 twin with the same (widened) values; the twin's gradients follow.
struct Twin {
  ParameterStore low, f32;
  explicit Twin(DType dt) : low(big_store(dt, dt)), f32(big_store(DType::f32, DType::f32)) {
    fill_params(low);
    Tensor(f32.flat_params()).copy_from(low.flat_params());
  }
  void grads(int64_t step) {
    fill_grads(low, step);
    Tensor(f32.flat_grads()).copy_from(low.flat_grads());
  }
};

template <class Opt, class Cfg>
void check_against_fp32(Cfg cfg, DType dt, bool reference, int threads) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + (reference ? " reference" : " fast") + " threads " +
               std::to_string(threads));
  Twin t(dt);
  Cfg master_cfg = cfg;
  master_cfg.rounding = UpdateRounding::master;
  Opt low(t.low, master_cfg), f32(t.f32, cfg);
  EXPECT_EQ(low.param_dtype(), dt);
  EXPECT_EQ(low.state_dtype(), DType::f32);
  ASSERT_TRUE(low.master().defined());
  EXPECT_EQ(low.master().dtype(), DType::f32);
  EXPECT_EQ(low.state_bytes(), f32.state_bytes() + t.f32.flat_numel() * 4) << "state + the fp32 masters";
  const RunMode mode(reference, threads);
  for (int64_t step = 1; step <= 3; ++step) {
    t.grads(step);
    low.step(t.low, 1e-2f);
    f32.step(t.f32, 1e-2f);
    ASSERT_EQ(raw_bytes(low.master()), raw_bytes(t.f32.flat_params())) << "step " << step;
    ASSERT_EQ(raw_bytes(t.low.flat_params()), raw_bytes(t.f32.flat_params().to(dt))) << "step " << step;
  }
  const OptimizerState a = low.state(), b = f32.state();
  for (auto [x, y] : {std::pair{&a.exp_avg, &b.exp_avg}, std::pair{&a.exp_avg_sq, &b.exp_avg_sq},
                      std::pair{&a.momentum_buffer, &b.momentum_buffer}})
    EXPECT_EQ(raw_bytes(*x), raw_bytes(*y));
  EXPECT_FALSE(a.compensation.defined());
}

TEST(MasterWeights, AdamWStepIsTheFp32StepOnTheWidenedGradients) {
  for (DType dt : {DType::bf16, DType::f16})
    for (bool ref : {false, true})
      for (int threads : {1, 2}) check_against_fp32<AdamW>(AdamWConfig{}, dt, ref, threads);
}

TEST(MasterWeights, SgdStepIsTheFp32StepOnTheWidenedGradients) {
  SgdConfig c;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  c.nesterov = true;
  for (DType dt : {DType::bf16, DType::f16})
    for (bool ref : {false, true})
      for (int threads : {1, 2}) check_against_fp32<SGD>(c, dt, ref, threads);
  SgdConfig plain;  // no momentum buffer: the masters are the whole state
  check_against_fp32<SGD>(plain, DType::bf16, false, 2);
}

// Small updates that nearest rounding of bf16 weights loses accumulate in the masters and reach
// the weights once they add up to a bf16 step.
TEST(MasterWeights, UpdatesBelowHalfAnUlpAreKept) {
  ParameterStore s = small_store(DType::bf16, DType::bf16), n = small_store(DType::bf16, DType::bf16);
  Tensor(s.flat_params()).fill(1.0);
  Tensor(n.flat_params()).fill(1.0);
  SgdConfig c;
  c.weight_decay = 0.f;
  c.rounding = UpdateRounding::master;
  SGD master(s, c);
  c.rounding = UpdateRounding::nearest;
  SGD nearest(n, c);
  for (int step = 0; step < 8; ++step) {  // 8 updates of -2^-10 (each below half an ulp): 1 - 2^-7
    Tensor(s.flat_grads()).fill(1.0);
    Tensor(n.flat_grads()).fill(1.0);
    master.step(s, 1.f / 1024);
    nearest.step(n, 1.f / 1024);
  }
  const int64_t i = s.infos()[0].offset;
  EXPECT_EQ(get_flat(n.flat_params(), i), 1.f) << "nearest loses every update below half an ulp";
  EXPECT_EQ(get_flat(s.flat_params(), i), 1.f - 1.f / 128);
  EXPECT_EQ(get_flat(master.master(), i), 1.f - 1.f / 128);
}

// The masters are filled from the weights at the first step, not at construction, so weights
// loaded after the optimizer was built are the start (--init-from).
TEST(MasterWeights, FilledFromTheWeightsAtTheFirstStep) {
  ParameterStore s = small_store(DType::bf16, DType::bf16);
  AdamWConfig c;
  c.rounding = UpdateRounding::master;
  AdamW opt(s, c);
  fill_params(s);  // after construction
  ParameterStore f = small_store(DType::f32, DType::f32);
  Tensor(f.flat_params()).copy_from(s.flat_params());
  AdamW ref(f, AdamWConfig{});
  fill_grads(s, 1);
  Tensor(f.flat_grads()).copy_from(s.flat_grads());
  opt.step(s, 1e-3f);
  ref.step(f, 1e-3f);
  EXPECT_EQ(raw_bytes(opt.master()), raw_bytes(f.flat_params()));
}

// A checkpoint round trip continues bit for bit; set_state without masters refills them from
// the weights; restore refuses a state that has no masters, or has them when not kept.
TEST(MasterWeights, StateRoundTripAndRefusals) {
  Twin t(DType::bf16);
  AdamWConfig c;
  c.rounding = UpdateRounding::master;
  AdamW a(t.low, c);
  t.grads(1);
  a.step(t.low, 1e-2f);
  const OptimizerState s = a.state();
  ASSERT_TRUE(s.master.defined());
  EXPECT_EQ(s.exp_avg.dtype(), DType::f32);

  ParameterStore copy = big_store(DType::bf16, DType::bf16);
  Tensor(copy.flat_params()).copy_from(t.low.flat_params());
  AdamW b(copy, c);
  b.restore(s);
  t.grads(2);
  Tensor(copy.flat_grads()).copy_from(t.low.flat_grads());
  a.step(t.low, 1e-2f);
  b.step(copy, 1e-2f);
  EXPECT_EQ(raw_bytes(a.master()), raw_bytes(b.master()));
  EXPECT_EQ(raw_bytes(t.low.flat_params()), raw_bytes(copy.flat_params()));

  OptimizerState no_master = s;
  no_master.master = Tensor();
  AdamW d(copy, c);
  EXPECT_NE(expect_throw<ArgumentError>([&] { d.restore(no_master); }).find("no fp32 master weights"),
            std::string::npos);
  AdamWConfig nearest;
  AdamW e(copy, nearest);
  EXPECT_NE(expect_throw<ArgumentError>([&] { e.restore(s); }).find("unexpected fp32 master weights"),
            std::string::npos);
  // set_state without masters: the next step takes them from the weights.
  d.set_state(s.steps, s.exp_avg, s.exp_avg_sq);
  d.step(copy, 1e-2f);
  EXPECT_EQ(raw_bytes(d.master().to(DType::bf16)), raw_bytes(copy.flat_params()));
  expect_throw<ShapeError>(
      [&] { d.set_state(1, s.exp_avg, s.exp_avg_sq, {}, Tensor::zeros({7}, DType::f32)); });
}

// fp32 stores ignore the rounding (there is nothing to round): no masters are kept.
TEST(MasterWeights, Fp32StoresKeepNone) {
  ParameterStore s = small_store();
  AdamWConfig c;
  c.rounding = UpdateRounding::master;
  AdamW a(s, c);
  EXPECT_FALSE(a.master().defined());
  EXPECT_EQ(a.state_dtype(), DType::f32);
  EXPECT_FALSE(a.state().master.defined());
}

TEST(MasterWeights, KernelsRefuseWrongCalls) {
  const std::vector<FlatSpan> spans{{0, 4, true}};
  float p[4] = {1, 2, 3, 4}, m[4] = {}, v[4] = {};
  const bf16 g[4] = {bf16_from_f32(1.f), bf16_from_f32(1.f), bf16_from_f32(1.f), bf16_from_f32(1.f)};
  bf16 out[4];
  fp16 out16[4];
  const AdamWScalars s = adamw_scalars(AdamWConfig{}, 1e-3f, 1);
  expect_throw<ArgumentError>([&] { adamw_update(p, g, m, v, spans, s, WorkingCopyOut{}); });
  expect_throw<ArgumentError>([&] { adamw_update_ref(p, g, m, v, spans, s, WorkingCopyOut{}); });
  expect_throw<DTypeError>([&] { adamw_update(p, g, m, v, spans, s, WorkingCopyOut{out16, DType::f16}); });
  adamw_update(p, g, m, v, spans, s, WorkingCopyOut{out, DType::bf16});
  EXPECT_EQ(f32_from_bf16(out[0]), f32_from_bf16(bf16_from_f32(p[0])));
  // The 16-bit in-place kernels have no masters to update.
  bf16 p16[4] = {}, m16[4] = {}, v16[4] = {};
  const LowpWrite w{UpdateRounding::master, 0, 0};
  expect_throw<ArgumentError>([&] { adamw_update(p16, g, m16, v16, nullptr, spans, s, w); });
  SgdScalars sg{-0.1f, 0.f, 0.f, 1.f, true, false};
  expect_throw<ArgumentError>([&] { sgd_update(p16, g, nullptr, nullptr, spans, sg, w); });
  expect_throw<ArgumentError>([&] { sgd_update(p, g, nullptr, spans, sg, WorkingCopyOut{}); });
}

}  // namespace
}  // namespace mixtrain
