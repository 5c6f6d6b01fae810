// The memory predictor against the allocator's tracker over the whole matrix: gpt-nano in every
// precision mode, with and without activation checkpointing, AdamW and SGD, at a shape where the
// fixed state dominates and one where activations do, plus Kahan and stochastic rounding, odd
// shapes and gradient accumulation; the peak total and every category's peak must agree
// (gpt_memory_util.h). A few of these also run with the fast tests (gpt_memory_test.cpp).
#include "models/gpt_memory_util.h"

namespace mixtrain::gpt_memory_test {
namespace {

class GptMemoryVsTracker : public testing::TestWithParam<Case> {};

TEST_P(GptMemoryVsTracker, PeaksAgree) { expect_agree(run(GetParam()), name_of(GetParam())); }

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

INSTANTIATE_TEST_SUITE_P(Nano, GptMemoryVsTracker, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return name_of(i.param); });

}  // namespace
}  // namespace mixtrain::gpt_memory_test
