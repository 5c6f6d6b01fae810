// The memory prediction (a run on the meta device) against the allocator's tracker over a real run,
// to the byte, over the whole matrix: gpt-nano in every
// precision mode, with and without activation checkpointing, AdamW and SGD, at a shape where the
// fixed state dominates and one where activations do, plus Kahan and stochastic rounding, odd
// shapes, gradient accumulation and dropout; the peak total and every category's peak must agree
// (memory_prediction_util.h). A few of these also run with the fast tests
// (memory_prediction_test.cpp).
#include <fstream>

#include "train/memory_prediction_util.h"

namespace mixtrain::memory_prediction_test {
namespace {

class MemoryPredictionVsTracker : public testing::TestWithParam<Case> {};

TEST_P(MemoryPredictionVsTracker, PeaksAgree) { expect_agree(run(GetParam()), name_of(GetParam())); }

std::vector<Case> cases() {
  std::vector<Case> v;
  for (PrecisionMode m : all_precision_modes())
    for (bool ckpt : {false, true}) {
      // Fixed state (weights, gradients, optimizer) dominates; both optimizers.
      for (const char* optimizer : {"adamw", "sgd"}) v.push_back({m, 2, 32, ckpt, optimizer});
      // Activations dominate (and, without checkpointing, the attention probabilities matter).
      v.push_back({m, 8, 128, ckpt, "adamw"});
    }
  v.push_back({PrecisionMode::true_bf16, 3, 37, false, "adamw", UpdateRounding::kahan});
  v.push_back({PrecisionMode::true16, 3, 37, true, "sgd", UpdateRounding::stochastic});
  v.push_back({PrecisionMode::mixed_bf16, 4, 64, true, "adamw", UpdateRounding::nearest, "gpt-nano", 2});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Nano, MemoryPredictionVsTracker, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return name_of(i.param); });

// With dropout the attention runs unfused (q k^T, causal softmax, dropout, matmul), and dropout
// sites appear after the embeddings and both residual branches.
TEST(MemoryPredictionVsTrackerDropout, PeaksAgree) {
  const std::string config = testing::TempDir() + "memory_prediction_dropout.json";
  {
    std::ofstream f(config);
    f << R"({"n_layer": 2, "n_head": 3, "n_embd": 96, "block_size": 64, "dropout": 0.1})";
  }
  for (PrecisionMode m : {PrecisionMode::true32, PrecisionMode::mixed_bf16, PrecisionMode::mixed16})
    for (bool ckpt : {false, true}) {
      Case c{m, 4, 64, ckpt, "adamw"};
      c.model = config;
      expect_agree(run(c), name_of(c) + "_dropout");
    }
}

}  // namespace
}  // namespace mixtrain::memory_prediction_test
