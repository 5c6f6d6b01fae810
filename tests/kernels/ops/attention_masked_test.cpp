// The fused encoder attention (kernels/attention_ops.h masked_attention_fused_*,
// cpu/attention_masked_cpu.cpp): in the op harness against the reference (the definition in plain
// loops), bit for bit across thread counts; lengths off the 32-row blocks, padded and fully padded
// batch rows, dropout on and off; the scalar tiles against AMX's; against the composed op it
// replaces; and when masked_attention takes it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/attention_ops.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::test {
namespace {

// sizes = {B, H, T, D}; flags: 1 = dropout p = 0.1 (else none), 2 = a negative scale, 3 = dropout
// with q, k, v read in place out of one (B, T, 3C) tensor and the results written in place into
// rows (as masked_attention_qkv passes them); + 8: the same through the portable row loops (on a
// CPU with AVX-512 the masked maximum and the exponentials otherwise run softmax_avx512.cpp's).
std::vector<OpConfig> masked_configs() {
  std::vector<OpConfig> c;
  const std::vector<std::vector<int64_t>> sizes{
      {1, 1, 32, 32}, {2, 3, 40, 32}, {3, 2, 77, 64}, {2, 2, 128, 32}};
  for (DType t : {DType::bf16, DType::f32})
    for (const auto& sz : sizes)
      for (int flags : {0, 1, 2}) {
        if (t == DType::f32 && sz[2] == 128) continue;  // the f32 staging is the same at every size
        OpConfig g;
        g.sizes = sz;
        g.in = g.out = t;
        g.flags = flags;
        g.seed = 31 + static_cast<uint64_t>(sz[2] * 3 + flags);
        const char* what = flags == 1 ? " dropout" : flags == 2 ? " scale<0" : "";
        g.label = std::string(dtype_name(t)) + " B=" + std::to_string(sz[0]) + " H=" + std::to_string(sz[1]) +
                  " T=" + std::to_string(sz[2]) + " D=" + std::to_string(sz[3]) + what;
        c.push_back(g);
      }
  for (DType t : {DType::bf16, DType::f32}) {
    OpConfig g;
    g.sizes = {3, 2, 40, 32};
    g.in = g.out = t;
    g.flags = 3;
    g.seed = 71;
    g.label = std::string(dtype_name(t)) + " B=3 H=2 T=40 D=32 dropout in place";
    c.push_back(g);
  }
  return with_portable_twins(c, 8);
}
int kind(const OpConfig& cfg) { return cfg.flags & 7; }

// (B, H, T, D) view of the which-th block of C columns of rows (B, T, W).
Tensor heads_of_rows(const Tensor& rows, int which, int64_t H, int64_t D) {
  const int64_t B = rows.size(0), T = rows.size(1), W = rows.size(2);
  return rows.as_strided({B, H, T, D}, {T * W, D, W, 1}, which * H * D);
}

float scale_of(const OpConfig& cfg) {
  const float s = 1.f / std::sqrt(static_cast<float>(cfg.sizes[3]));
  return kind(cfg) == 2 ? -s : s;
}
float p_of(const OpConfig& cfg) { return kind(cfg) == 1 || kind(cfg) == 3 ? 0.1f : 0.f; }

// Batch row 0 all real; row 1 right-padded after T/3 keys plus a padded key inside; row 2 all
// padding (uniform probabilities).
Tensor key_mask_of(const OpConfig& cfg) {
  const int64_t B = cfg.sizes[0], T = cfg.sizes[2];
  std::vector<int32_t> m(static_cast<size_t>(B * T), 1);
  if (B > 1) {
    for (int64_t t = T / 3; t < T; ++t) m[static_cast<size_t>(T + t)] = 0;
    m[static_cast<size_t>(T + 1)] = 0;
  }
  if (B > 2)
    for (int64_t t = 0; t < T; ++t) m[static_cast<size_t>(2 * T + t)] = 0;
  return Tensor::from_ints(m, {B, T});
}

struct Inputs {
  Tensor q, k, v, g, mask;
};
Inputs inputs(const OpConfig& cfg) {
  const Shape s{cfg.sizes[0] * cfg.sizes[1], cfg.sizes[2], cfg.sizes[3]};
  return {Tensor::rand_uniform(s, cfg.in, cfg.seed, -2.f, 2.f),
          Tensor::rand_uniform(s, cfg.in, cfg.seed + 1, -2.f, 2.f),
          Tensor::rand_uniform(s, cfg.in, cfg.seed + 2, -2.f, 2.f),
          Tensor::rand_uniform(s, cfg.in, cfg.seed + 3, -1.f, 1.f), key_mask_of(cfg)};
}
constexpr uint64_t kSeed = 7, kOffset = 1000;

// As the causal op's (attention_fused_test.cpp): bf16 outputs of fp32 sums over T terms up to
// about 2 (dropout scales P by 1/0.9), where Pd or dS may sit one bf16 ulp apart.
Tolerance masked_tolerance(const OpConfig& cfg) { return default_tolerance(DType::bf16, cfg.sizes[2], 2.5); }

// flags 3: the operands as views of (B, T, 3C) and (B, T, C) rows; returns the rows written.
std::vector<Tensor> in_place(const OpConfig& cfg, bool backward, bool reference) {
  const int64_t B = cfg.sizes[0], H = cfg.sizes[1], T = cfg.sizes[2], D = cfg.sizes[3];
  const Tensor x = Tensor::rand_uniform({B, T, 3 * H * D}, cfg.in, cfg.seed, -2.f, 2.f);
  const Tensor q = heads_of_rows(x, 0, H, D), k = heads_of_rows(x, 1, H, D), v = heads_of_rows(x, 2, H, D);
  const Tensor mask = key_mask_of(cfg);
  if (!backward) {
    Tensor rows = Tensor::zeros({B, T, H * D}, cfg.in), y = heads_of_rows(rows, 0, H, D);
    (reference ? ref::masked_attention_fused_forward : mixtrain::masked_attention_fused_forward)(
        q, k, v, mask, scale_of(cfg), p_of(cfg), kSeed, kOffset, y);
    return {rows};
  }
  const Tensor gr = Tensor::rand_uniform({B, T, H * D}, cfg.in, cfg.seed + 1, -1.f, 1.f);
  Tensor dx = Tensor::zeros({B, T, 3 * H * D}, cfg.in);
  Tensor dq = heads_of_rows(dx, 0, H, D), dk = heads_of_rows(dx, 1, H, D), dv = heads_of_rows(dx, 2, H, D);
  (reference ? ref::masked_attention_fused_backward : mixtrain::masked_attention_fused_backward)(
      q, k, v, mask, heads_of_rows(gr, 0, H, D), scale_of(cfg), p_of(cfg), kSeed, kOffset, dq, dk, dv);
  return {dx};
}

std::vector<Tensor> forward(const OpConfig& cfg, const Inputs& in, bool reference) {
  Tensor y = Tensor::empty(in.q.shape(), cfg.in);
  (reference ? ref::masked_attention_fused_forward : mixtrain::masked_attention_fused_forward)(
      in.q, in.k, in.v, in.mask, scale_of(cfg), p_of(cfg), kSeed, kOffset, y);
  return {y};
}
std::vector<Tensor> backward(const OpConfig& cfg, const Inputs& in, bool reference) {
  Tensor dq = Tensor::empty(in.q.shape(), cfg.in), dk = Tensor::empty(in.q.shape(), cfg.in),
         dv = Tensor::empty(in.q.shape(), cfg.in);
  (reference ? ref::masked_attention_fused_backward : mixtrain::masked_attention_fused_backward)(
      in.q, in.k, in.v, in.mask, in.g, scale_of(cfg), p_of(cfg), kSeed, kOffset, dq, dk, dv);
  return {dq, dk, dv};
}

struct MaskedAttentionFusedForwardTest : OpTest {
  std::string name() const override { return "masked_attention_fused_forward"; }
  std::vector<OpConfig> configs() const override { return masked_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const PortableForms portable((cfg.flags & 8) != 0);
    if (kind(cfg) == 3) return in_place(cfg, false, reference);
    return forward(cfg, inputs(cfg), reference);
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override { return masked_tolerance(cfg); }
};

struct MaskedAttentionFusedBackwardTest : OpTest {
  std::string name() const override { return "masked_attention_fused_backward"; }
  std::vector<OpConfig> configs() const override { return masked_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const PortableForms portable((cfg.flags & 8) != 0);
    if (kind(cfg) == 3) return in_place(cfg, true, reference);
    return backward(cfg, inputs(cfg), reference);
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override { return masked_tolerance(cfg); }
};

bool several_heads(const OpConfig& cfg) { return cfg.sizes[0] * cfg.sizes[1] >= 3; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(MaskedAttentionFusedForwardTest, several_heads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(MaskedAttentionFusedBackwardTest, several_heads);

// The padded keys' gradients are exactly zero, and a fully padded batch row's probabilities are
// uniform (its output is the mean of v over all T keys).
TEST(MaskedAttentionFused, PaddedKeysGetNoGradientAndNoRealKeyIsUniform) {
  OpConfig cfg = masked_configs()[6];  // bf16 B=3 H=2 T=77 D=64
  ASSERT_EQ(cfg.sizes[0], 3);
  cfg.in = cfg.out = DType::f32;  // exact zeros and means are easier to read in f32
  const Inputs in = inputs(cfg);
  const std::vector<Tensor> g = backward(cfg, in, false);
  const int64_t H = cfg.sizes[1], T = cfg.sizes[2], D = cfg.sizes[3];
  const auto mask = in.mask.to_doubles();
  const std::vector<double> dk = g[1].to_doubles(), dv = g[2].to_doubles();
  for (int64_t h = H; h < 2 * H; ++h)  // batch row 1
    for (int64_t t = 0; t < T; ++t) {
      if (mask[size_t(T + t)] != 0) continue;
      for (const std::vector<double>* o : {&dk, &dv})
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ((*o)[size_t((h * T + t) * D + d)], 0.0) << "head " << h << " key " << t;
    }
  const Tensor y = forward(cfg, in, false)[0];
  const auto yv = y.to_doubles(), vv = in.v.to_doubles();
  for (int64_t h = 2 * H; h < 3 * H; ++h)  // batch row 2: no real key
    for (int64_t d = 0; d < D; ++d) {
      double mean = 0, mag = 0;
      for (int64_t j = 0; j < T; ++j) {
        const double x = static_cast<double>(
            f32_from_bf16(bf16_from_f32(static_cast<float>(vv[size_t((h * T + j) * D + d)]))));
        mean += static_cast<double>(f32_from_bf16(bf16_from_f32(1.f / static_cast<float>(T)))) * x;
        mag += std::fabs(x);
      }
      ASSERT_NEAR(yv[size_t((h * T + 5) * D + d)], mean, 1e-6 * mag) << "head " << h << " d " << d;
    }
}

// The blocked algorithm with the scalar tiles against AMX's: only the order of fp32 sums inside a
// tile GEMM differs.
TEST(MaskedAttentionFused, SameWithEitherTiles) {
  if (!cpu::tiles::amx_usable())
    GTEST_SKIP() << "no AMX-BF16 on this CPU (the op harness runs the scalar tiles)";
  for (const OpConfig& cfg : masked_configs()) {
    if (cfg.sizes[2] != 77 || cfg.flags != 1)
      continue;  // (in place: the op harness, as the causal op's)  // T = 77 with dropout, bf16 and f32
    SCOPED_TRACE(cfg.label);
    const Inputs in = inputs(cfg);
    std::vector<Tensor> out[2];
    for (int i = 0; i < 2; ++i) {
      const cpu::tiles::Kernels& tk = i ? cpu::tiles::amx_kernels() : cpu::tiles::reference_kernels();
      Tensor y = Tensor::empty(in.q.shape(), cfg.in), dq = Tensor::empty(in.q.shape(), cfg.in),
             dk = Tensor::empty(in.q.shape(), cfg.in), dv = Tensor::empty(in.q.shape(), cfg.in);
      cpu::masked_attention_fused_forward_with(tk, in.q, in.k, in.v, in.mask, scale_of(cfg), p_of(cfg), kSeed,
                                               kOffset, y);
      cpu::masked_attention_fused_backward_with(tk, in.q, in.k, in.v, in.mask, in.g, scale_of(cfg), p_of(cfg),
                                                kSeed, kOffset, dq, dk, dv);
      out[i] = {y, dq, dk, dv};
    }
    for (size_t j = 0; j < out[0].size(); ++j)
      EXPECT_TRUE(all_close(out[0][j], out[1][j], masked_tolerance(cfg), "output " + std::to_string(j)));
  }
}

// The fused op against the composition it replaces in masked_attention (the GEMM, masked softmax
// and dropout ops, written out here): that one stores S and P in bf16, this one keeps them f32, so
// they agree to a few bf16 ulps of the output.
TEST(MaskedAttentionFused, AgreesWithTheComposedOps) {
  for (const OpConfig& cfg : masked_configs()) {
    if (cfg.in != DType::bf16 || cfg.sizes[2] != 40 || kind(cfg) == 3) continue;
    SCOPED_TRACE(cfg.label);
    const Inputs in = inputs(cfg);
    const float scale = scale_of(cfg), p = p_of(cfg);
    const Tensor y = forward(cfg, in, false)[0];
    const Tensor s = matmul(in.q, in.k, false, true, DType::bf16);
    Tensor probs = Tensor::empty(s.shape(), DType::bf16), pd = Tensor::empty(s.shape(), DType::bf16);
    masked_softmax(s, in.mask, scale, probs);
    if (p != 0.f)
      dropout_mask(probs, p, kSeed, kOffset, pd);
    else
      pd = probs;
    const Tensor yc = matmul(pd, in.v, false, false, DType::bf16);
    EXPECT_TRUE(all_close(y, yc, default_tolerance(DType::bf16, cfg.sizes[2], 8.0), "y"));
  }
}

// When masked_attention takes the fused op (attention_ops.h).
TEST(MaskedAttentionFused, AppliesWhereItShould) {
  if (std::getenv("MIXTRAIN_ATTENTION_FUSED")) GTEST_SKIP() << "MIXTRAIN_ATTENTION_FUSED set";
  const bool amx = cpu::tiles::amx_usable();
  const auto q = [](DType t, int64_t T, int64_t D) { return Tensor::zeros({4, T, D}, t); };
  EXPECT_EQ(masked_attention_fused_applies(q(DType::bf16, 77, 32)), amx);
  EXPECT_EQ(masked_attention_fused_applies(q(DType::bf16, 512, 64)), amx);
  EXPECT_FALSE(masked_attention_fused_applies(q(DType::bf16, 64, 48)));   // D % 32
  EXPECT_FALSE(masked_attention_fused_applies(q(DType::bf16, 64, 288)));  // D > 256
  EXPECT_FALSE(masked_attention_fused_applies(q(DType::f16, 64, 32)));
  EXPECT_FALSE(masked_attention_fused_applies(q(DType::f32, 64, 32)));  // highest
  const MatmulPrecisionScope medium(MatmulPrecision::medium);
  EXPECT_EQ(masked_attention_fused_applies(q(DType::f32, 64, 32)),
            amx && matmul_precision_uses_bf16(MatmulPrecision::medium));
}

TEST(MaskedAttentionFused, RefusesBadOperands) {
  const Tensor q = Tensor::zeros({4, 40, 32}, DType::bf16),
               mask = Tensor::from_ints(std::vector<int32_t>(80, 1), {2, 40});
  Tensor y = Tensor::zeros({4, 40, 32}, DType::bf16);
  const Tensor q48 = Tensor::zeros({4, 40, 48}, DType::bf16);
  Tensor y48 = Tensor::zeros({4, 40, 48}, DType::bf16);
  EXPECT_THROW(masked_attention_fused_forward(q48, q48, q48, mask, 1.f, 0.f, 0, 0, y48), ShapeError);  // D
  const Tensor h = Tensor::zeros({4, 40, 32}, DType::f16);
  Tensor yh = Tensor::zeros({4, 40, 32}, DType::f16);
  EXPECT_THROW(masked_attention_fused_forward(h, h, h, mask, 1.f, 0.f, 0, 0, yh), ShapeError);  // dtype
  Tensor small = Tensor::zeros({4, 40, 16}, DType::bf16);
  EXPECT_THROW(masked_attention_fused_forward(q, q, q, mask, 1.f, 0.f, 0, 0, small), ShapeError);  // y
  EXPECT_THROW(masked_attention_fused_forward(q, q, q, mask, 1.f, 1.f, 0, 0, y), ArgumentError);   // p
  const Tensor bad_mask = Tensor::from_ints(std::vector<int32_t>(120, 1), {3, 40});  // 3 does not divide 4
  EXPECT_THROW(masked_attention_fused_forward(q, q, q, bad_mask, 1.f, 0.f, 0, 0, y), ShapeError);
  Tensor dq = Tensor::zeros({4, 40, 32}, DType::bf16), dk = dq.clone(), none;
  EXPECT_THROW(masked_attention_fused_backward(q, q, q, mask, q, 1.f, 0.f, 0, 0, dq, dk, none), ShapeError);
}

}  // namespace
}  // namespace mixtrain::test
