// Shared by the tests of the train-level reports (compare, memory, bench train): options for a
// gpt-nano run small enough to take well under a second (the built-in corpus, 2 x 16 tokens).
#pragma once
#include "mixtrain/train/trainer.h"

namespace mixtrain::train_test {

inline TrainOptions tiny_run(PrecisionMode mode = PrecisionMode::true32) {
  TrainOptions o;
  o.model = "gpt-nano";
  o.precision = mode;
  o.batch_size = 2;
  o.seq_len = 16;
  o.steps = 2;
  o.eval_batches = 1;
  o.quiet = true;
  o.measure_gemm_rate = false;  // 0.5 s per run; the tests that need the MFU turn it back on
  return o;
}

}  // namespace mixtrain::train_test
