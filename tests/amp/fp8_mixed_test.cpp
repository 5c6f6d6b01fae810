// fp8-mixed (amp/fp8.h, autograd/fp8_linear.h): which layers run in fp8; the delayed recipe's
// history and scale update; the fp8 linear's three GEMMs equal a float64 product of the operands
// the recipe's quantization makes (the emulation is faithful), for every recipe and format. (That
// gpt-nano trains in fp8-mixed under every recipe, close to bf16-mixed: fp8_mixed_slow_test.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../train/tiny_run.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/autograd/fp8_linear.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

using autograd::Fp8Role;
using autograd::Fp8Site;
using autograd::Var;

std::vector<std::vector<std::string>> blocks(int n) {
  std::vector<std::vector<std::string>> b;
  for (int i = 0; i < n; ++i)
    b.push_back({"h." + std::to_string(i) + ".attn.c_attn", "h." + std::to_string(i) + ".mlp.c_fc"});
  return b;
}

TEST(Fp8State, FirstAndLastBlocksAndKeptPatternsStayBf16) {
  Fp8Config c;
  const Fp8State s(c, blocks(4), {});
  EXPECT_EQ(s.sites().size(), 4u);  // blocks 1 and 2
  EXPECT_EQ(s.site("h.0.attn.c_attn"), nullptr);
  EXPECT_EQ(s.site("h.3.mlp.c_fc"), nullptr);
  ASSERT_NE(s.site("h.1.mlp.c_fc"), nullptr);
  EXPECT_EQ(s.site("h.1.mlp.c_fc")->bwd_format, DType::f8_e5m2);  // delayed: hybrid
  c.keep_first_last = false;
  c.keep = {"h.2.*"};
  c.recipe = Fp8Recipe::mxfp8;
  const Fp8State t(c, blocks(4), {"h.3.mlp.*"});
  EXPECT_EQ(t.sites().size(), 5u);  // 8 minus h.2's two minus h.3.mlp.c_fc
  EXPECT_EQ(t.site("h.2.attn.c_attn"), nullptr);
  EXPECT_EQ(t.site("h.3.mlp.c_fc"), nullptr);
  ASSERT_NE(t.site("h.0.attn.c_attn"), nullptr);
  EXPECT_EQ(t.site("h.0.attn.c_attn")->bwd_format, DType::f8_e4m3);  // mxfp8: E4M3 throughout
  EXPECT_EQ(t.kept().size(), 3u);
  Fp8Config bad;
  bad.amax_history = 0;
  EXPECT_THROW(Fp8State(bad, blocks(3), {}), ArgumentError);
}

TEST(Fp8State, DelayedScalesComeFromTheHistory) {
  Fp8Config c;
  c.amax_history = 3;
  c.keep_first_last = false;
  Fp8State s(c, blocks(1), {});
  Fp8Site& site = *s.sites()[0];
  EXPECT_EQ(site.scale[0], 1.f);  // before any update: 1, as Transformer Engine starts
  const float in_amax[] = {2.f, 8.f, 1.f, 0.5f, 0.f};
  const float want[] = {224.f, 56.f, 56.f, 56.f, 448.f / 1.f};
  // history 3, max: after the 4th update the 2 has left; after the 5th the 8 too (max of 1, 0.5, 0).
  for (int k = 0; k < 5; ++k) {
    site.step_amax = {in_amax[k], 4.f, in_amax[k] == 0.f ? 0.f : 57344.f};
    s.update();
    EXPECT_EQ(site.scale[0], want[k]) << "update " << k;
    EXPECT_EQ(site.scale[1], 112.f);
    EXPECT_EQ(site.scale[2], 1.f);  // E5M2: 57344 / 57344, and kept when the amax is 0
    EXPECT_EQ(site.step_amax[0], 0.f);
  }
  EXPECT_EQ(s.history(0, Fp8Role::input), (std::vector<float>{1.f, 0.5f, 0.f}));
  // most_recent with a margin; an inf amax keeps the scale.
  c.amax_compute = Fp8AmaxCompute::most_recent;
  c.margin = 1;
  Fp8State m(c, blocks(1), {});
  Fp8Site& ms = *m.sites()[0];
  ms.step_amax = {8.f, 0.f, 0.f};
  m.update();
  EXPECT_EQ(ms.scale[0], 28.f);  // 448 / 8 / 2
  ms.step_amax = {INFINITY, 0.f, 0.f};
  m.update();
  EXPECT_EQ(ms.scale[0], 28.f);
  ms.step_amax = {2.f, 0.f, 0.f};
  m.update();
  EXPECT_EQ(ms.scale[0], 112.f);
}

// The dequantized operand in double: codes times their block's scale_inv (the reference's op).
std::vector<double> dequantized(const Tensor& t, const Fp8Quant& how, float given_scale) {
  const int64_t R = t.size(0), C = t.size(1);
  const int64_t br = how.block_rows ? how.block_rows : R, bc = how.block_cols ? how.block_cols : C;
  const Shape g{(R + br - 1) / br, (C + bc - 1) / bc};
  Tensor q = Tensor::empty({R, C}, DType::f32), si = Tensor::empty(g, DType::f32),
         am = Tensor::empty(g, DType::f32);
  const Tensor s = Tensor::full({1, 1}, DType::f32, given_scale);
  Fp8Quant codes = how;
  codes.dequantize = false;
  ref::fp8_quantize(t, codes, given_scale > 0 ? &s : nullptr, q, si, am);
  const std::vector<double> qv = q.to_doubles(), sv = si.to_doubles();
  std::vector<double> d(size_t(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      d[size_t(r * C + c)] = qv[size_t(r * C + c)] * sv[size_t((r / br) * g[1] + c / bc)];
  return d;
}

// a (M, K) . b (N, K)^T in double.
std::vector<double> abt(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t N,
                        int64_t K) {
  std::vector<double> o(size_t(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[size_t(m * K + k)] * b[size_t(n * K + k)];
      o[size_t(m * N + n)] = s;
    }
  return o;
}
std::vector<double> transpose(const std::vector<double>& a, int64_t R, int64_t C) {
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t[size_t(c * R + r)] = a[size_t(r * C + c)];
  return t;
}

// |got - want| within fp32 accumulation over K terms of the absolute products plus the output's
// rounding (bf16 for y and dx, fp32 for the weight gradient).
void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::vector<double>& absum, double out_eps, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-6 * absum[i] + out_eps * std::fabs(want[i]) + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 3)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", float64 of the quantized operands "
                    << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}
std::vector<double> absolute(const std::vector<double>& v) {
  std::vector<double> a(v);
  for (double& x : a) x = std::fabs(x);
  return a;
}

TEST(Fp8Linear, EveryGemmEqualsTheFloat64ProductOfTheQuantizedOperands) {
  const int64_t M = 160, N = 96, K = 256;  // 160 rows: partial 128-blocks and 32-blocks
  for (Fp8Recipe recipe :
       {Fp8Recipe::delayed, Fp8Recipe::current, Fp8Recipe::rowwise, Fp8Recipe::mxfp8, Fp8Recipe::block})
    for (Fp8Format fmt : {Fp8Format::hybrid, Fp8Format::e4m3}) {
      const std::string name = std::string(fp8_recipe_name(recipe)) + "/" + fp8_format_name(fmt);
      auto site = std::make_shared<Fp8Site>();
      site->recipe = recipe;
      site->bwd_format = fmt == Fp8Format::hybrid ? DType::f8_e5m2 : DType::f8_e4m3;
      if (recipe == Fp8Recipe::delayed) site->scale = {150.f, 900.f, 3000.f};
      const Tensor xt = Tensor::randn({M, K}, DType::bf16, 11, 0.f, 1.f);
      const Tensor wt = Tensor::randn({N, K}, DType::bf16, 12, 0.f, 0.05f);
      const Tensor gt = Tensor::randn({M, N}, DType::bf16, 13, 0.f, 0.01f);
      Var x(xt.clone(), true), w(wt.clone(), true);
      Var y = autograd::fp8_linear(x, w, Var(), site);
      y.backward_from(gt);
      const auto q = [&](bool weight, bool along_cols, Fp8Role role) {
        return fp8_operand_quant(recipe, site->format(role), weight, along_cols);
      };
      const float sx = recipe == Fp8Recipe::delayed ? site->scale[0] : 0.f;
      const float sw = recipe == Fp8Recipe::delayed ? site->scale[1] : 0.f;
      const float sg = recipe == Fp8Recipe::delayed ? site->scale[2] : 0.f;
      // y = x w^T: both along K.
      const std::vector<double> xq = dequantized(xt, q(false, true, Fp8Role::input), sx);
      const std::vector<double> wq = dequantized(wt, q(true, true, Fp8Role::weight), sw);
      expect_close(y.value().to_doubles(), abt(xq, wq, M, N, K), abt(absolute(xq), absolute(wq), M, N, K),
                   0x1p-8, name + " y");
      // dx = dy w: dy along N, w along its rows N.
      const std::vector<double> gq = dequantized(gt, q(false, true, Fp8Role::grad_output), sg);
      const std::vector<double> wc =
          transpose(dequantized(wt, q(true, false, Fp8Role::weight), sw), N, K);  // (K, N)
      expect_close(x.grad().to_doubles(), abt(gq, wc, M, K, N), abt(absolute(gq), absolute(wc), M, K, N),
                   0x1p-8, name + " dx");
      // dw = dy^T x: both along M.
      const std::vector<double> gc =
          transpose(dequantized(gt, q(false, false, Fp8Role::grad_output), sg), M, N);
      const std::vector<double> xc = transpose(dequantized(xt, q(false, false, Fp8Role::input), sx), M, K);
      expect_close(w.grad().to_doubles(), abt(gc, xc, N, K, M), abt(absolute(gc), absolute(xc), N, K, M),
                   0x1p-8, name + " dw");
      // Every role's amax was recorded.
      for (int r = 0; r < 3; ++r) EXPECT_GT(site->step_amax[size_t(r)], 0.f) << name;
    }
}

TEST(Fp8Mixed, AModelWithNoFp8LayerIsRefused) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_fp8);
  o.fp8.keep = {"*"};
  EXPECT_THROW(train(o), ArgumentError);
}

// The delayed recipe's histories and scales are training state: a run stopped and resumed ends
// where the straight run ends, bit for bit; a checkpoint of another recipe is refused.
TEST(Fp8Mixed, DelayedScalingResumesExactly) {
  const std::string dir = ::testing::TempDir() + "fp8_resume_" + std::to_string(::getpid());
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_fp8);
  o.steps = 6;
  o.fp8.keep_first_last = false;
  o.fp8.amax_history = 4;  // wraps within the run
  const TrainSummary straight = train(o);
  TrainOptions a = o;
  a.checkpoint.dir = dir;
  a.checkpoint.stop_after = 3;
  (void)train(a);
  TrainOptions b = o;
  b.checkpoint.resume = dir;
  const TrainSummary resumed = train(b);
  EXPECT_EQ(resumed.final_train_loss, straight.final_train_loss);
  EXPECT_EQ(resumed.val_loss, straight.val_loss);
  TrainOptions c = b;
  c.fp8.recipe = Fp8Recipe::current;
  EXPECT_THROW(train(c), ArgumentError);  // "options differ, fp8.recipe ..."
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mixtrain
