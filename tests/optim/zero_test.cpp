// ZeRO stage 1 in one process: the partition of the arena, optimizers over parts against one over
// the whole arena (bit for bit, every precision's kernels, with a working copy), checkpoint state
// restored into a part, and the gradient norm assembled from the parts' block sums against the
// whole-buffer kernels. The collectives themselves run under mpirun in tests/cli/zero_cli_test.sh.
#include "mixtrain/optim/zero.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "kernels/gradient_kernels.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/state_kernels.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/sgd.h"
#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

TEST(ZeroPartition, EqualBlockAlignedPartsCoverTheArena) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{8193}, int64_t{35000}, int64_t{1} << 20}) {
    for (int ranks : {1, 2, 3, 8}) {
      const ZeroPartition p = zero_partition(n, ranks, ranks - 1);
      ASSERT_EQ(p.ranks(), ranks);
      EXPECT_EQ(p.rank, ranks - 1);
      EXPECT_EQ(p.shards.front().begin, 0);
      EXPECT_EQ(p.shards.back().end, n);
      const int64_t S = (n + 4096 * ranks - 1) / (4096 * ranks) * 4096;
      int64_t blocks = 0;
      for (int r = 0; r < ranks; ++r) {
        const FlatRange& s = p.shards[size_t(r)];
        if (r > 0) {
          EXPECT_EQ(s.begin, p.shards[size_t(r - 1)].end);
        }
        EXPECT_EQ(s.begin % kGradNormBlock == 0 || s.begin == n, true) << "n " << n << " rank " << r;
        EXPECT_EQ(s.size(), std::max<int64_t>(0, std::min(S, n - std::min(n, S * r))))
            << "n " << n << " rank " << r;
        EXPECT_EQ(p.first_block(r), blocks);
        blocks += p.blocks(r);
      }
      EXPECT_EQ(p.total_blocks(), (n + kGradNormBlock - 1) / kGradNormBlock);
    }
  }
  EXPECT_THROW(zero_partition(10, 0, 0), ArgumentError);
  EXPECT_THROW(zero_partition(10, 2, 2), ArgumentError);
  EXPECT_THROW(zero_partition(10, 2, -1), ArgumentError);
}

// A store whose arena spans several 4096-element blocks, so two ranks' parts cut a parameter.
ParameterStore zero_store(DType dtype, DType grad_dtype) { return big_store(dtype, grad_dtype); }

struct Case {
  const char* name;
  DType dtype;
  OptimizerConfig config;
  bool working;  // an fp32 arena with a bf16 working copy (the *-mixed modes)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }  // names the case in ctest's list

class ShardedOptimizer : public ::testing::TestWithParam<Case> {};

// Two optimizers over the two ranks' parts, stepping one store, give the store (and the working
// copy) the one whole-arena optimizer gives, bit for bit; their state is the whole state cut in two.
TEST_P(ShardedOptimizer, PartsUpdateAsTheWhole) {
  const Case& c = GetParam();
  ParameterStore whole = zero_store(c.dtype, c.dtype), parts = zero_store(c.dtype, c.dtype);
  fill_params(whole);
  fill_params(parts);
  const int64_t n = whole.flat_numel();
  auto opt = make_optimizer(whole, c.config);
  const ZeroPartition p0 = zero_partition(n, 2, 0), p1 = zero_partition(n, 2, 1);
  ASSERT_GT(p1.mine().size(), 0);
  auto o0 = make_optimizer(parts, c.config, p0.mine());
  auto o1 = make_optimizer(parts, c.config, p1.mine());
  EXPECT_EQ(o0->shard().begin, 0);
  EXPECT_EQ(o1->shard().end, n);
  EXPECT_EQ(o0->state_bytes() + o1->state_bytes(), opt->state_bytes());
  Tensor w_whole, w_parts;
  if (c.working) {
    w_whole = Tensor::zeros({n}, DType::bf16);
    w_parts = Tensor::zeros({n}, DType::bf16);
  }
  for (int64_t step = 1; step <= 3; ++step) {
    fill_grads(whole, step);
    fill_grads(parts, step);
    opt->step(whole, 1e-2f, c.working ? &w_whole : nullptr);
    o0->step(parts, 1e-2f, c.working ? &w_parts : nullptr);
    o1->step(parts, 1e-2f, c.working ? &w_parts : nullptr);
  }
  EXPECT_EQ(raw_bytes(whole.flat_params()), raw_bytes(parts.flat_params()));
  if (c.working) {
    EXPECT_EQ(raw_bytes(w_whole), raw_bytes(w_parts));
  }
  // The state, concatenated over the parts, is the whole optimizer's.
  const OptimizerState s = opt->state(), s0 = o0->state(), s1 = o1->state();
  for (auto [w, a, b] :
       {std::tuple{&s.exp_avg, &s0.exp_avg, &s1.exp_avg},
        std::tuple{&s.exp_avg_sq, &s0.exp_avg_sq, &s1.exp_avg_sq},
        std::tuple{&s.momentum_buffer, &s0.momentum_buffer, &s1.momentum_buffer},
        std::tuple{&s.compensation, &s0.compensation, &s1.compensation},
        std::tuple{&s.master, &s0.master, &s1.master},
        std::tuple{&s.exp_avg_q.absmax, &s0.exp_avg_q.absmax, &s1.exp_avg_q.absmax},
        std::tuple{&s.exp_avg_q.fallback, &s0.exp_avg_q.fallback, &s1.exp_avg_q.fallback},
        std::tuple{&s.exp_avg_sq_q.absmax, &s0.exp_avg_sq_q.absmax, &s1.exp_avg_sq_q.absmax},
        std::tuple{&s.momentum_q.absmax, &s0.momentum_q.absmax, &s1.momentum_q.absmax},
        std::tuple{&s.momentum_q.fallback, &s0.momentum_q.fallback, &s1.momentum_q.fallback}}) {
    ASSERT_EQ(w->defined(), a->defined());
    if (!w->defined()) continue;
    std::vector<unsigned char> joined = raw_bytes(*a), tail = raw_bytes(*b);
    joined.insert(joined.end(), tail.begin(), tail.end());
    EXPECT_EQ(raw_bytes(*w), joined);
  }
  // A whole-arena checkpoint state restores into a part: the part's elements.
  auto again = make_optimizer(parts, c.config, p1.mine());
  again->restore(s);
  EXPECT_EQ(again->steps(), 3);
  const OptimizerState r = again->state();
  const Tensor& want = s1.exp_avg.defined() ? s1.exp_avg : s1.momentum_buffer;
  const Tensor& got = r.exp_avg.defined() ? r.exp_avg : r.momentum_buffer;
  if (want.defined()) {
    EXPECT_EQ(raw_bytes(got), raw_bytes(want));
  }
}

OptimizerConfig adamw(UpdateRounding rounding = UpdateRounding::nearest,
                      StatePrecision state = StatePrecision::fp32);
OptimizerConfig sgd(UpdateRounding rounding = UpdateRounding::nearest,
                    StatePrecision state = StatePrecision::fp32);

// A working copy of the arena's end only (from its first parameter autocast casts): each part
// writes the elements of its shard the copy holds, the copy starting before, inside or after
// rank 1's shard; the result is the whole optimizer's copy, bit for bit.
TEST(ShardedOptimizerWorkingCopy, ACopyOfTheArenasEndIsWrittenByEachPartAsByTheWhole) {
  for (const OptimizerConfig& config : {adamw(), sgd()}) {
    ParameterStore probe = zero_store(DType::f32, DType::f32);
    const int64_t n = probe.flat_numel();
    const ZeroPartition p0 = zero_partition(n, 2, 0), p1 = zero_partition(n, 2, 1);
    for (int64_t first : {int64_t{0}, p0.mine().begin + 3, p1.mine().begin, p1.mine().begin + 7, n - 1}) {
      ParameterStore whole = zero_store(DType::f32, DType::f32), parts = zero_store(DType::f32, DType::f32);
      fill_params(whole);
      fill_params(parts);
      auto opt = make_optimizer(whole, config);
      auto o0 = make_optimizer(parts, config, p0.mine());
      auto o1 = make_optimizer(parts, config, p1.mine());
      Tensor w_whole = Tensor::zeros({n - first}, DType::bf16),
             w_parts = Tensor::zeros({n - first}, DType::bf16);
      for (int64_t step = 1; step <= 2; ++step) {
        fill_grads(whole, step);
        fill_grads(parts, step);
        opt->step(whole, 1e-2f, &w_whole);
        o0->step(parts, 1e-2f, &w_parts);
        o1->step(parts, 1e-2f, &w_parts);
      }
      EXPECT_EQ(raw_bytes(whole.flat_params()), raw_bytes(parts.flat_params())) << "first " << first;
      EXPECT_EQ(raw_bytes(w_whole), raw_bytes(w_parts)) << "first " << first;
      // and it is the end of the arena rounded, where the optimizer's spans are
      const Tensor expected = whole.flat_params().slice(0, first, n).to(DType::bf16);
      for (const ParamInfo& info : whole.infos())
        for (int64_t i = std::max(info.offset, first); i < info.offset + info.numel; ++i)
          ASSERT_EQ(get_flat(w_whole, i - first), get_flat(expected, i - first))
              << "first " << first << " element " << i;
    }
  }
}

OptimizerConfig adamw(UpdateRounding rounding, StatePrecision state) {
  OptimizerConfig c;
  c.state = state;
  c.kind = OptimizerKind::adamw;
  c.rounding = rounding;
  c.seed = 7;
  return c;
}
OptimizerConfig sgd(UpdateRounding rounding, StatePrecision state) {
  OptimizerConfig c;
  c.state = state;
  c.kind = OptimizerKind::sgd;
  c.momentum = 0.9f;
  c.weight_decay = 1e-2f;
  c.rounding = rounding;
  c.seed = 7;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Zero, ShardedOptimizer,
    ::testing::Values(Case{"adamw_f32", DType::f32, adamw(), false},
                      Case{"adamw_f32_working", DType::f32, adamw(), true},
                      Case{"adamw_bf16", DType::bf16, adamw(), false},
                      Case{"adamw_bf16_stochastic", DType::bf16, adamw(UpdateRounding::stochastic), false},
                      Case{"adamw_f16_kahan", DType::f16, adamw(UpdateRounding::kahan), false},
                      Case{"sgd_f32_working", DType::f32, sgd(), true},
                      Case{"sgd_bf16_stochastic", DType::bf16, sgd(UpdateRounding::stochastic), false},
                      Case{"adamw_bf16_master", DType::bf16, adamw(UpdateRounding::master), false},
                      Case{"sgd_f16_master", DType::f16, sgd(UpdateRounding::master), false},
                      Case{"adamw_f32_working_state_bf16", DType::f32,
                           adamw(UpdateRounding::nearest, StatePrecision::bf16), true},
                      Case{"adamw_f32_working_state_int8", DType::f32,
                           adamw(UpdateRounding::nearest, StatePrecision::int8), true},
                      Case{"sgd_f32_state_int8", DType::f32,
                           sgd(UpdateRounding::nearest, StatePrecision::int8), false},
                      Case{"adamw_bf16_master_state_int8", DType::bf16,
                           adamw(UpdateRounding::master, StatePrecision::int8), false}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The norm from the parts' block sums, added in block order, is the whole buffer's, bit for bit:
// the fused unscale (fp32) and the blocked reduction (16-bit).
TEST(ZeroGradientNorm, BlockSumsOfThePartsGiveTheWholeNorm) {
  for (int ranks : {2, 3}) {
    ParameterStore a = zero_store(DType::f32, DType::f32), b = zero_store(DType::f32, DType::f32);
    fill_grads(a, 1);
    fill_grads(b, 1);
    const int64_t n = a.flat_numel();
    const UnscaleResult whole = unscale_and_check(a.flat_grads().data<float>(), n, 0.25f);
    const ZeroPartition p = zero_partition(n, ranks, 0);
    std::vector<double> sums(size_t(p.total_blocks()));
    bool found = false;
    for (int r = 0; r < ranks; ++r) {
      const FlatRange& s = p.shards[size_t(r)];
      found |= unscale_and_check_blocks(b.flat_grads().data<float>() + s.begin, s.size(), 0.25f,
                                        sums.data() + p.first_block(r));
    }
    EXPECT_FALSE(found);
    EXPECT_FALSE(whole.found_inf);
    EXPECT_EQ(sum_block_sums(sums.data(), p.total_blocks()), whole.sum_squares) << ranks << " ranks";
    EXPECT_EQ(raw_bytes(a.flat_grads()), raw_bytes(b.flat_grads()));  // unscaled alike
  }
  for (DType d : {DType::bf16, DType::f16}) {
    ParameterStore s = zero_store(d, d);
    fill_grads(s, 2);
    const int64_t n = s.flat_numel();
    const ZeroPartition p = zero_partition(n, 2, 0);
    std::vector<float> sums(size_t(p.total_blocks()));
    for (int r = 0; r < 2; ++r) {
      const FlatRange& part = p.shards[size_t(r)];
      sum_squares_blocks_16(static_cast<const char*>(s.flat_grads().raw_data()) + part.begin * 2, d,
                            part.size(), sums.data() + p.first_block(r));
    }
    EXPECT_EQ(combine_sum_squares_blocks_16(sums.data(), p.total_blocks()),
              reduce(s.flat_grads(), ReduceOp::sum_squares))
        << dtype_name(d);
  }
  // A non-finite element in one part is found there.
  ParameterStore s = zero_store(DType::f32, DType::f32);
  fill_grads(s, 1);
  const ZeroPartition p = zero_partition(s.flat_numel(), 2, 1);
  s.flat_grads().data<float>()[p.mine().begin + 3] = INFINITY;
  std::vector<double> sums(size_t(p.blocks(1)));
  EXPECT_TRUE(unscale_and_check_blocks(s.flat_grads().data<float>() + p.mine().begin, p.mine().size(), 1.f,
                                       sums.data()));
  EXPECT_FALSE(std::isfinite(sum_block_sums(sums.data(), p.blocks(1))));
}

// One process: the ZeroOptimizer is one part, the whole arena; its step is the plain step.
TEST(ZeroOptimizer, OneRankIsThePlainOptimizer) {
  SingleProcess world;
  ParameterStore a = zero_store(DType::f32, DType::f32), b = zero_store(DType::f32, DType::f32);
  fill_params(a);
  fill_params(b);
  ZeroOptimizer z(a, adamw(), world);
  auto plain = make_optimizer(b, adamw());
  EXPECT_EQ(z.shard().begin, 0);
  EXPECT_EQ(z.shard().end, a.flat_numel());
  EXPECT_EQ(z.state_bytes(), plain->state_bytes());
  for (int64_t step = 1; step <= 2; ++step) {
    fill_grads(a, step);
    fill_grads(b, step);
    z.step(a, 1e-2f);
    plain->step(b, 1e-2f);
  }
  EXPECT_EQ(raw_bytes(a.flat_params()), raw_bytes(b.flat_params()));
  EXPECT_EQ(raw_bytes(z.state().exp_avg), raw_bytes(plain->state().exp_avg));
}

// More ranks than 4096-element blocks: the last ranks' parts are empty, clamped to the arena's end,
// which need not lie on the 256-element grid of the int8 state (the tiny model under 4 ranks). An
// optimizer over such a part holds nothing and steps nothing, in every state precision.
TEST(ZeroOptimizer, AnEmptyPartAtTheArenasEndHoldsNoState) {
  for (const OptimizerConfig& config : {adamw(), adamw(UpdateRounding::nearest, StatePrecision::bf16),
                                        adamw(UpdateRounding::nearest, StatePrecision::int8),
                                        sgd(UpdateRounding::nearest, StatePrecision::int8),
                                        adamw(UpdateRounding::master, StatePrecision::int8)}) {
    const DType dtype = config.rounding == UpdateRounding::master ? DType::bf16 : DType::f32;
    ParameterStore s = zero_store(dtype, dtype);
    fill_params(s);
    const int64_t n = s.flat_numel();
    ASSERT_NE(n % kInt8StateBlock, 0) << "the arena's end must lie off the grid for this test";
    const int ranks = static_cast<int>(n / 4096) + 2;
    const ZeroPartition p = zero_partition(n, ranks, ranks - 1);
    ASSERT_EQ(p.mine().begin, n);
    ASSERT_EQ(p.mine().size(), 0);
    auto opt = make_optimizer(s, config, p.mine());
    EXPECT_EQ(opt->state_bytes(), 0);
    const std::vector<unsigned char> before = raw_bytes(s.flat_params());
    fill_grads(s, 1);
    opt->step(s, 1e-2f);
    EXPECT_EQ(raw_bytes(s.flat_params()), before);
  }
}

TEST(ZeroOptimizer, BadShardsAreRefused) {
  ParameterStore s = small_store();
  EXPECT_THROW(make_optimizer(s, adamw(), FlatRange{5, 3}), ArgumentError);
  EXPECT_THROW(make_optimizer(s, adamw(), FlatRange{0, s.flat_numel() + 1}), ArgumentError);
  EXPECT_THROW(make_optimizer(s, sgd(), FlatRange{-1, 2}), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
