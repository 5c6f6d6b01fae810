// heads_copy and dropout_mask (kernels/attention_ops.h) in the op harness: the CPU kernels
// (OpenMP) against their serial references, bit for bit (both are copies / one multiply), for
// 1 and 2 threads; plus the argument checks.
#include "kernels/attention_ops.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/ops/op_harness.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/matmul_precision.h"

namespace mixtrain::test {
namespace {

Tolerance exact() { return {}; }

// sizes = {B, T, H, D, n}; flags bit 0: to_heads (else heads -> rows).
struct HeadsCopyTest : OpTest {
  std::string name() const override { return "heads_copy"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    for (DType t : {DType::f32, DType::bf16})
      for (int to_heads : {1, 0})
        for (auto sz :
             std::vector<std::vector<int64_t>>{{2, 5, 3, 4, 3}, {3, 64, 4, 32, 3}, {1, 7, 2, 8, 1}}) {
          OpConfig g;
          g.sizes = sz;
          g.in = g.out = t;
          g.flags = to_heads;
          g.label = std::string(dtype_name(t)) + (to_heads ? " to heads" : " to rows") +
                    " B=" + std::to_string(sz[0]) + " T=" + std::to_string(sz[1]) +
                    " n=" + std::to_string(sz[4]);
          c.push_back(g);
        }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t B = cfg.sizes[0], T = cfg.sizes[1], H = cfg.sizes[2], D = cfg.sizes[3], n = cfg.sizes[4];
    Tensor rows = cfg.flags ? Tensor::rand_uniform({B, T, n * H * D}, cfg.in, cfg.seed, -2.f, 2.f)
                            : Tensor::zeros({B, T, n * H * D}, cfg.in);
    std::vector<Tensor> heads;
    for (int64_t i = 0; i < n; ++i)
      heads.push_back(cfg.flags
                          ? Tensor::zeros({B * H, T, D}, cfg.in)
                          : Tensor::rand_uniform({B * H, T, D}, cfg.in, cfg.seed + uint64_t(i), -2.f, 2.f));
    (reference ? ref::heads_copy : mixtrain::heads_copy)(rows, heads, H, cfg.flags != 0);
    std::vector<Tensor> out{rows};
    out.insert(out.end(), heads.begin(), heads.end());
    return out;
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return exact(); }
};

// Any shape (strided ones too: the mask counts elements in row-major order); the dropout
// probability from flags (percent).
struct DropoutMaskTest : OpTest {
  std::string name() const override { return "dropout_mask"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (const std::vector<int64_t>& sz : {std::vector<int64_t>{1}, std::vector<int64_t>{1000},
                                             std::vector<int64_t>{70001}, std::vector<int64_t>{4, 3, 2100}})
        for (int pct : {10, 50})
          for (bool nc : {false, true}) {
            if (nc && sz.size() == 1) continue;
            OpConfig g;
            g.sizes = sz;
            g.in = g.out = t;
            g.flags = pct;
            g.non_contiguous = nc;
            g.seed = seed++;
            g.label = std::string(dtype_name(t)) + " " + Shape(sz.begin(), sz.end()).to_string() +
                      (nc ? " strided" : "") + " p=" + std::to_string(pct) + "%";
            c.push_back(g);
          }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Tensor x = test::make_input(Shape(cfg.sizes.begin(), cfg.sizes.end()), cfg.in, cfg.seed,
                                      cfg.non_contiguous, -2.f, 2.f);
    Tensor out = Tensor::empty(x.shape(), cfg.out);
    (reference ? ref::dropout_mask : mixtrain::dropout_mask)(x, cfg.flags / 100.f, 42, 1000, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return exact(); }
};

// The configurations large enough to be split across threads (the 1-vs-2-threads check).
bool split_across_threads(const OpConfig& c) { return c.sizes[0] >= 3 || c.sizes.size() == 1; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(HeadsCopyTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(DropoutMaskTest, split_across_threads);

TEST(AttentionOps, DropoutKeepsAboutOneMinusPAndScales) {
  const Tensor x = Tensor::full({100000}, DType::f32, 1.f);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  dropout_mask(x, 0.25f, 7, 0, out);
  int64_t kept = 0;
  for (double v : out.to_doubles()) {
    ASSERT_TRUE(v == 0.0 || v == double(1.f / 0.75f)) << v;
    kept += v != 0.0;
  }
  EXPECT_NEAR(double(kept) / 100000.0, 0.75, 0.01);
}

TEST(AttentionOps, BadArgumentsAreTypedErrors) {
  const Tensor x = Tensor::zeros({4}, DType::f32);
  Tensor out = Tensor::empty({5}, DType::f32);
  EXPECT_THROW(dropout_mask(x, 0.1f, 1, 0, out), ShapeError);
  Tensor ok = Tensor::empty({4}, DType::f32);
  EXPECT_THROW(dropout_mask(x, 1.f, 1, 0, ok), ArgumentError);
  const Tensor rows = Tensor::zeros({2, 3, 12}, DType::f32);
  EXPECT_THROW(heads_copy(rows, {Tensor::zeros({4, 3, 5}, DType::f32)}, 2, true),
               ShapeError);  // D = 6, not 5
  EXPECT_THROW(heads_copy(rows, {Tensor::zeros({4, 3, 6}, DType::bf16)}, 2, true), ShapeError);  // dtype
  EXPECT_THROW(heads_copy(rows, {Tensor::zeros({4, 3, 6}, DType::f32)}, 5, true), ShapeError);   // 12 % 5
}

// The causal attention's query blocks: 64 rows, except bf16 (and fp32 at matmul precision medium)
// whose GEMMs run on AMX, up to T = 256
// (one block of all T rows: dense operands, which oneDNN's AMX matmul needs); the probabilities
// are stored per block.
TEST(AttentionBlocks, OneBlockForBf16OnAmxElse64Rows) {
  if (std::getenv("MIXTRAIN_ATTENTION_BLOCK") != nullptr)
    GTEST_SKIP() << "MIXTRAIN_ATTENTION_BLOCK sets the block";
  const bool amx = gemm_impl_name(DType::bf16).find("amx") != std::string::npos;
  EXPECT_EQ(attention_query_block(256, DType::f32), 64);
  EXPECT_EQ(attention_query_block(40, DType::f32), 40);
  EXPECT_EQ(attention_query_block(1024, DType::bf16), 64);
  EXPECT_EQ(attention_query_block(256, DType::bf16), amx ? 256 : 64);
  EXPECT_EQ(attention_prob_blocks(2, 256, DType::bf16).size(), amx ? 1u : 4u);
  EXPECT_EQ(attention_prob_blocks(2, 256, DType::f32).size(), 4u);
  EXPECT_EQ(attention_prob_blocks(2, 150, DType::f32).back().shape(), (Shape{2, 150 - 128, 150}));
  // fp32 under --matmul-precision medium: one block where its products run on AMX too.
  const MatmulPrecisionScope medium(MatmulPrecision::medium);
  EXPECT_EQ(attention_query_block(256, DType::f32),
            amx && matmul_precision_uses_bf16(MatmulPrecision::medium) ? 256 : 64);
}

}  // namespace
}  // namespace mixtrain::test
