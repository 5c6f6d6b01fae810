// The fused causal attention (kernels/attention_ops.h, cpu/attention_fused_cpu.cpp) and its bf16
// tile kernels (cpu/amx_tiles.h): in the op harness against the reference (the definition in plain
// loops), in place on (B, H, T, D) views too, bit for bit across thread counts; the packing against its index
// formulas, bit for bit; the tile GEMMs against plain sums; the blocked algorithm with the scalar
// tiles (any CPU) against AMX's (where the CPU has AMX); and when the attention ops take it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention_ops.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/op_harness.h"
#include "mixtrain/kernels/matmul_precision.h"

namespace mixtrain::test {
namespace {

// sizes = {n, T, D}; flags: 1 = negative scale (softmax's other branch), 2 = backward without dq/dk.
std::vector<OpConfig> fused_configs() {
  std::vector<OpConfig> c;
  for (DType t : {DType::bf16, DType::f32})
    for (auto sz : std::vector<std::vector<int64_t>>{{1, 32, 32}, {3, 64, 64}, {5, 96, 32}, {4, 128, 128}})
      for (int flags : {0, 1, 2}) {
        if (t == DType::f32 && sz[1] == 128) continue;  // the f32 staging is the same at every size
        OpConfig g;
        g.sizes = sz;
        g.in = g.out = t;
        g.flags = flags;
        g.seed = 11 + static_cast<uint64_t>(sz[1] + flags);
        const char* what = flags == 1 ? " scale<0" : flags == 2 ? " dv only" : "";
        g.label = std::string(dtype_name(t)) + " n=" + std::to_string(sz[0]) + " T=" + std::to_string(sz[1]) +
                  " D=" + std::to_string(sz[2]) + what;
        c.push_back(g);
      }
  for (DType t : {DType::bf16, DType::f32}) {  // in place: 2 batch rows x 3 heads out of (B, T, 3C)
    OpConfig g;
    g.sizes = {6, 64, 32};
    g.in = g.out = t;
    g.flags = 3;
    g.seed = 97;
    g.label = std::string(dtype_name(t)) + " B=2 H=3 T=64 D=32 in place";
    c.push_back(g);
  }
  return c;
}

// flags 3: q, k, v (B, H, T, D) views of one (B, T, 3C) tensor, y (and dy, dq, dk, dv) views of
// (B, T, C) (or (B, T, 3C)) rows, as attention_qkv passes them; B = 2.
constexpr int64_t kInPlaceB = 2;
Tensor heads_of_rows(const Tensor& rows, int which, int64_t H, int64_t D) {
  const int64_t B = rows.size(0), T = rows.size(1), W = rows.size(2);
  return rows.as_strided({B, H, T, D}, {T * W, D, W, 1}, which * H * D);
}

float scale_of(const OpConfig& cfg) {
  const float s = 1.f / std::sqrt(static_cast<float>(cfg.sizes[2]));
  return cfg.flags == 1 ? -s : s;
}

struct Inputs {
  Tensor q, k, v, g;
};
Inputs inputs(const OpConfig& cfg) {
  const Shape s{cfg.sizes[0], cfg.sizes[1], cfg.sizes[2]};
  return {Tensor::rand_uniform(s, cfg.in, cfg.seed, -2.f, 2.f),
          Tensor::rand_uniform(s, cfg.in, cfg.seed + 1, -2.f, 2.f),
          Tensor::rand_uniform(s, cfg.in, cfg.seed + 2, -2.f, 2.f),
          Tensor::rand_uniform(s, cfg.in, cfg.seed + 3, -1.f, 1.f)};
}

// The outputs are bf16 after fp32 sums over T (keys or queries) of terms up to about 2 in size:
// the harness budget for that (one bf16 ulp plus the fp32 order differences), scaled by the terms.
// P itself and everything after it may sit one ulp apart where an fp32 score rounded across a bf16
// boundary; that moves a sum of T terms by far less than this budget's atol. f32 operands get the
// same budget: their GEMM inputs are rounded to bf16 (P among them), so a P one f32 ulp apart can
// round to bf16 values one bf16 ulp apart.
Tolerance fused_tolerance(const OpConfig& cfg) { return default_tolerance(DType::bf16, cfg.sizes[1], 2.0); }

struct AttentionFusedForwardTest : OpTest {
  std::string name() const override { return "attention_fused_forward"; }
  std::vector<OpConfig> configs() const override { return fused_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const auto op = reference ? ref::attention_fused_forward : mixtrain::attention_fused_forward;
    if (cfg.flags == 3) {
      const int64_t B = kInPlaceB, H = cfg.sizes[0] / B, T = cfg.sizes[1], D = cfg.sizes[2];
      const Tensor x = Tensor::rand_uniform({B, T, 3 * H * D}, cfg.in, cfg.seed, -2.f, 2.f);
      Tensor rows = Tensor::zeros({B, T, H * D}, cfg.in), probs = Tensor::empty({B * H, T, T}, cfg.in);
      Tensor y = heads_of_rows(rows, 0, H, D);
      op(heads_of_rows(x, 0, H, D), heads_of_rows(x, 1, H, D), heads_of_rows(x, 2, H, D), scale_of(cfg),
         probs, y);
      return {probs, rows};
    }
    const Inputs in = inputs(cfg);
    const int64_t n = cfg.sizes[0], T = cfg.sizes[1];
    Tensor probs = Tensor::empty({n, T, T}, cfg.in), y = Tensor::empty(in.q.shape(), cfg.in);
    (reference ? ref::attention_fused_forward : mixtrain::attention_fused_forward)(in.q, in.k, in.v,
                                                                                   scale_of(cfg), probs, y);
    return {probs, y};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override { return fused_tolerance(cfg); }
};

struct AttentionFusedBackwardTest : OpTest {
  std::string name() const override { return "attention_fused_backward"; }
  std::vector<OpConfig> configs() const override { return fused_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const auto op = reference ? ref::attention_fused_backward : mixtrain::attention_fused_backward;
    if (cfg.flags == 3) {
      const int64_t B = kInPlaceB, H = cfg.sizes[0] / B, T = cfg.sizes[1], D = cfg.sizes[2];
      const Tensor x = Tensor::rand_uniform({B, T, 3 * H * D}, cfg.in, cfg.seed, -2.f, 2.f);
      const Tensor gr = Tensor::rand_uniform({B, T, H * D}, cfg.in, cfg.seed + 1, -1.f, 1.f);
      const Tensor q = heads_of_rows(x, 0, H, D), k = heads_of_rows(x, 1, H, D),
                   v = heads_of_rows(x, 2, H, D);
      Tensor probs = Tensor::empty({B * H, T, T}, cfg.in), y = Tensor::empty({B, H, T, D}, cfg.in);
      ref::attention_fused_forward(q, k, v, scale_of(cfg), probs, y);
      Tensor dx = Tensor::zeros({B, T, 3 * H * D}, cfg.in);
      Tensor dq = heads_of_rows(dx, 0, H, D), dk = heads_of_rows(dx, 1, H, D),
             dv = heads_of_rows(dx, 2, H, D);
      op(q, k, v, probs, heads_of_rows(gr, 0, H, D), scale_of(cfg), dq, dk, dv);
      return {dx};
    }
    const Inputs in = inputs(cfg);
    const int64_t n = cfg.sizes[0], T = cfg.sizes[1];
    // The probabilities both sides start from: the reference's (the backward is under test here).
    Tensor probs = Tensor::empty({n, T, T}, cfg.in), y = Tensor::empty(in.q.shape(), cfg.in);
    ref::attention_fused_forward(in.q, in.k, in.v, scale_of(cfg), probs, y);
    const bool qk = cfg.flags != 2;
    Tensor dq = qk ? Tensor::empty(in.q.shape(), cfg.in) : Tensor(),
           dk = qk ? Tensor::empty(in.q.shape(), cfg.in) : Tensor(), dv = Tensor::empty(in.q.shape(), cfg.in);
    (reference ? ref::attention_fused_backward : mixtrain::attention_fused_backward)(
        in.q, in.k, in.v, probs, in.g, scale_of(cfg), dq, dk, dv);
    if (!qk) return {dv};
    return {dq, dk, dv};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override { return fused_tolerance(cfg); }
};

bool several_heads(const OpConfig& cfg) { return cfg.sizes[0] >= 3; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(AttentionFusedForwardTest, several_heads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(AttentionFusedBackwardTest, several_heads);

// ---- the tile kernels ------------------------------------------------------------------------------
std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = bf16_from_f32(u(rng));
  return v;
}
uint16_t bits(bf16 v) { return v.bits(); }

// Sizes on and off the 16 x 16 blocks of the AVX-512 transpose (its scalar remainder path).
TEST(AttentionTiles, PackingMatchesItsIndexFormulas) {
  for (auto [R, C] :
       std::vector<std::pair<int64_t, int64_t>>{{32, 64}, {64, 32}, {256, 64}, {6, 10}, {48, 20}}) {
    SCOPED_TRACE(std::to_string(R) + " x " + std::to_string(C));
    const int64_t ldx = C + 4;  // a row stride past the row
    const std::vector<bf16> X = random_bf16(static_cast<size_t>(R * ldx), static_cast<uint32_t>(R * 7 + C));
    // Rows in pairs: B = X (K = R rows, N = C columns).
    const int64_t ldb = 2 * C + 6;
    std::vector<bf16> Bp(static_cast<size_t>(R / 2 * ldb), bf16::from_bits(0xffff));
    cpu::tiles::pack_pairs_rows(X.data(), ldx, R, C, Bp.data(), ldb);
    for (int64_t k = 0; k < R; ++k)
      for (int64_t n = 0; n < C; ++n)
        ASSERT_EQ(bits(Bp[size_t((k / 2) * ldb + 2 * n + k % 2)]), bits(X[size_t(k * ldx + n)]))
            << k << "," << n;
    // Columns in pairs: B = X^T (N = R rows of X, K = C).
    const int64_t ldc = 2 * R + 2;
    std::vector<bf16> Bc(static_cast<size_t>(C / 2 * ldc));
    cpu::tiles::pack_pairs_cols(X.data(), ldx, R, C, Bc.data(), ldc);
    for (int64_t k = 0; k < C; ++k)
      for (int64_t n = 0; n < R; ++n)
        ASSERT_EQ(bits(Bc[size_t((k / 2) * ldc + 2 * n + k % 2)]), bits(X[size_t(n * ldx + k)]))
            << k << "," << n;
    // The transpose.
    const int64_t ldy = R + 2;
    std::vector<bf16> Y(static_cast<size_t>(C * ldy)), pairs(static_cast<size_t>(R * C));
    cpu::tiles::transpose(X.data(), ldx, R, C, Y.data(), ldy, pairs.data());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(bits(Y[size_t(c * ldy + r)]), bits(X[size_t(r * ldx + c)])) << r << "," << c;
  }
}

// C = A B + C0 in double (exact products, then one rounding) against the tile GEMMs' fp32 sums.
void check_tile_gemm(cpu::tiles::GemmFn gemm, int64_t M, int64_t N, int64_t K, bool accumulate) {
  SCOPED_TRACE(std::to_string(M) + " " + std::to_string(N) + " " + std::to_string(K) +
               (accumulate ? " +=" : ""));
  const int64_t lda = K + 8, ldb = 2 * N + 4, ldc = N + 3;
  const std::vector<bf16> A = random_bf16(size_t(M * lda), 1), Bp = random_bf16(size_t(K / 2 * ldb), 2);
  std::vector<float> C(size_t(M * ldc));
  for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<float>(i % 7) - 3.f;
  const std::vector<float> C0 = C;
  gemm(M, N, K, A.data(), lda, Bp.data(), ldb, C.data(), ldc, accumulate);
  const auto f = [](bf16 v) { return static_cast<double>(std::bit_cast<float>(uint32_t{v.bits()} << 16)); };
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = accumulate ? C0[size_t(m * ldc + n)] : 0.0, mag = std::fabs(s);
      for (int64_t k = 0; k < K; ++k) {
        const double p = f(A[size_t(m * lda + k)]) * f(Bp[size_t((k / 2) * ldb + 2 * n + k % 2)]);
        s += p;
        mag += std::fabs(p);
      }
      // fp32 sums of K + 1 terms in any order: within K eps32 of the sum of magnitudes.
      ASSERT_NEAR(C[size_t(m * ldc + n)], s, static_cast<double>(K + 1) * 0x1p-24 * mag) << m << "," << n;
    }
  for (int64_t m = 0; m < M; ++m)  // nothing written past N in a row
    for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[size_t(m * ldc + n)], C0[size_t(m * ldc + n)]);
}

TEST(AttentionTiles, ReferenceGemmSumsTheProducts) {
  check_tile_gemm(cpu::tiles::gemm_ref, 32, 64, 96, false);
  check_tile_gemm(cpu::tiles::gemm_ref, 64, 32, 32, true);
}

TEST(AttentionTiles, AmxGemmSumsTheProducts) {
  if (!cpu::tiles::amx_usable())
    GTEST_SKIP() << "no AMX-BF16 on this CPU (the reference tiles are tested above)";
  const cpu::tiles::Kernels& amx = cpu::tiles::amx_kernels();
  amx.begin();
  for (bool acc : {false, true})
    for (auto [M, N, K] :
         std::vector<std::array<int64_t, 3>>{{32, 32, 32}, {64, 96, 64}, {32, 256, 128}, {96, 32, 256}})
      check_tile_gemm(amx.gemm, M, N, K, acc);
  amx.end();
}

// The blocked algorithm with the scalar tiles against AMX's: the same blocks, the same row loops,
// so the only difference is the order of the fp32 sums inside a tile GEMM.
TEST(AttentionTiles, BlockedAlgorithmSameWithEitherTiles) {
  if (!cpu::tiles::amx_usable())
    GTEST_SKIP() << "no AMX-BF16 on this CPU (the op harness runs the scalar tiles)";
  for (const OpConfig& cfg : fused_configs()) {
    if (cfg.sizes[0] != 3 || cfg.flags != 0) continue;  // n=3 T=64 D=64, bf16 and f32
    SCOPED_TRACE(cfg.label);
    const Inputs in = inputs(cfg);
    const float s = scale_of(cfg);
    std::vector<Tensor> out[2];
    for (int i = 0; i < 2; ++i) {
      const cpu::tiles::Kernels& tk = i ? cpu::tiles::amx_kernels() : cpu::tiles::reference_kernels();
      Tensor probs = Tensor::empty({3, 64, 64}, cfg.in), y = Tensor::empty(in.q.shape(), cfg.in);
      cpu::attention_fused_forward_with(tk, in.q, in.k, in.v, s, probs, y);
      Tensor dq = Tensor::empty(in.q.shape(), cfg.in), dk = Tensor::empty(in.q.shape(), cfg.in),
             dv = Tensor::empty(in.q.shape(), cfg.in);
      cpu::attention_fused_backward_with(tk, in.q, in.k, in.v, probs, in.g, s, dq, dk, dv);
      out[i] = {probs, y, dq, dk, dv};
    }
    for (size_t j = 0; j < out[0].size(); ++j)
      EXPECT_TRUE(all_close(out[0][j], out[1][j], fused_tolerance(cfg), "output " + std::to_string(j)));
  }
}

// When the attention ops take the fused kernel (attention_ops.h): bf16 on AMX, T and D multiples
// of 32, one query block.
TEST(AttentionTiles, FusedAppliesWhereItShould) {
  if (std::getenv("MIXTRAIN_ATTENTION_FUSED") || std::getenv("MIXTRAIN_ATTENTION_BLOCK"))
    GTEST_SKIP() << "MIXTRAIN_ATTENTION_FUSED or MIXTRAIN_ATTENTION_BLOCK set";
  const bool amx = cpu::tiles::amx_usable();
  const auto q = [](DType t, int64_t T, int64_t D) { return Tensor::zeros({2, T, D}, t); };
  const auto probs = [](DType t, int64_t T) { return attention_prob_blocks(2, T, t); };
  EXPECT_EQ(attention_fused_applies(q(DType::bf16, 256, 64), probs(DType::bf16, 256)),
            amx && probs(DType::bf16, 256).size() == 1);
  EXPECT_FALSE(attention_fused_applies(q(DType::f32, 256, 64), probs(DType::f32, 256)));  // highest
  {
    const MatmulPrecisionScope medium(MatmulPrecision::medium);  // bf16 products: the fused op too
    EXPECT_EQ(
        attention_fused_applies(q(DType::f32, 256, 64), probs(DType::f32, 256)),
        amx && matmul_precision_uses_bf16(MatmulPrecision::medium) && probs(DType::f32, 256).size() == 1);
  }
  EXPECT_FALSE(attention_fused_applies(q(DType::bf16, 48, 64), probs(DType::bf16, 48)));
  EXPECT_FALSE(attention_fused_applies(q(DType::bf16, 64, 48), probs(DType::bf16, 64)));
  EXPECT_FALSE(attention_fused_applies(q(DType::bf16, 512, 64), probs(DType::bf16, 512)));  // 8 blocks
}

TEST(AttentionTiles, FusedOpsRefuseBadOperands) {
  Tensor q = Tensor::zeros({2, 64, 32}, DType::bf16), y = Tensor::zeros({2, 64, 32}, DType::bf16);
  Tensor probs = Tensor::zeros({2, 64, 64}, DType::bf16);
  Tensor odd = Tensor::zeros({2, 48, 32}, DType::bf16), odd_p = Tensor::zeros({2, 48, 48}, DType::bf16);
  EXPECT_THROW(attention_fused_forward(odd, odd, odd, 1.f, odd_p, odd), ShapeError);  // T % 32
  Tensor h = Tensor::zeros({2, 64, 32}, DType::f16), hp = Tensor::zeros({2, 64, 64}, DType::f16);
  EXPECT_THROW(attention_fused_forward(h, h, h, 1.f, hp, h), ShapeError);  // dtype
  Tensor f = Tensor::zeros({2, 64, 32}, DType::f32);
  EXPECT_THROW(attention_fused_forward(f, f, f, 1.f, probs, f), ShapeError);  // probs' dtype
  Tensor small_p = Tensor::zeros({2, 64, 32}, DType::bf16);
  EXPECT_THROW(attention_fused_forward(q, q, q, 1.f, small_p, y), ShapeError);  // probs shape
  Tensor none;
  EXPECT_THROW(attention_fused_backward(q, q, q, probs, q, 1.f, none, none, none), ShapeError);
  Tensor dq = Tensor::zeros({2, 64, 32}, DType::bf16);
  EXPECT_THROW(attention_fused_backward(q, q, q, probs, q, 1.f, dq, none, none),
               ShapeError);  // dq without dk
}

}  // namespace
}  // namespace mixtrain::test
