// Gpt::evaluate_batch with the fused LM head: the logits a chunk of rows at a time, giving the
// unfused evaluation's loss (within the rounding of summing chunk losses) and the same top-1
// predictions, in fp32 and under bf16 autocast, with ignored (-1) targets; and a smaller peak.
#include <gtest/gtest.h>

#include <string>

#include "mixtrain/data/data_source.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {
namespace {

struct Eval {
  EvalSums sums;
  int64_t peak;
};

Eval evaluate(const char* precision, bool fused) {
  GptConfig c;
  c.vocab_size = 20000, c.block_size = 32, c.n_layer = 1, c.n_head = 2, c.n_embd = 32;  // 104 rows a chunk
  MixedPrecision mp(precision);
  Gpt model(c, 7, mp.param_dtype(), mp.grad_dtype());
  model.set_fused_lm_head(fused);
  std::vector<int32_t> ids(16 * 32), targets(16 * 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7919 + 3) % 20000);
    targets[i] = i % 5 == 0 ? -1 : static_cast<int32_t>((i * 104729 + 11) % 20000);
  }
  Batch b;
  b.inputs = Tensor::from_ints(ids, {16, 32});
  b.targets = Tensor::from_ints(targets, {16, 32});
  b.rows = 15;  // as if the last row were padding: loss_sum is the mean times the real rows
  MemoryTracker::global().reset_peaks();
  const int64_t before = MemoryTracker::global().snapshot().peak_total;
  Eval e;
  mp.forward([&] {
    e.sums = model.evaluate_batch(b);
    return autograd::Var();
  });
  e.peak = MemoryTracker::global().snapshot().peak_total - before;
  return e;
}

TEST(FusedHeadEval, SameLossAndPredictionsAsTheUnfusedHead) {
  for (const char* p : {"32-true", "bf16-mixed"}) {
    const Eval u = evaluate(p, false), f = evaluate(p, true);
    EXPECT_EQ(f.sums.rows, 15) << p;
    EXPECT_EQ(f.sums.scored, u.sums.scored) << p;
    EXPECT_EQ(f.sums.scored, 16 * 32 - 16 * 32 / 5 - 1) << p;
    EXPECT_EQ(f.sums.correct, u.sums.correct) << p;
    EXPECT_NEAR(f.sums.loss_sum, u.sums.loss_sum, 1e-6 * u.sums.loss_sum) << p;
    EXPECT_GT(u.sums.loss_sum, 15 * 9.0) << p;  // about ln(20000) a row: a real loss, not zeros
    // The unfused head holds (512, 20000) logits in the compute dtype; the fused one 104 rows of
    // them at a time. Lower by at least half the logits: the other 152 rows' worth is room for
    // what the fused head holds besides its chunk, which depends on the GEMM route (a converted
    // fp32 weight where 16-bit GEMMs run as fp32 ones). With 256 rows and a bound of all their
    // bf16 logits this failed on a Xeon with AMX, where the unfused head holds its bf16 logits
    // and nothing more.
    const int64_t elem = std::string(p) == "32-true" ? 4 : 2;
    EXPECT_LT(f.peak, u.peak - 256 * 20000 * elem) << p;
  }
}

}  // namespace
}  // namespace mixtrain
