// Shared by the memory-predictor tests: one training run of gpt-nano (train(), as `mixtrain
// memory` runs it) next to the prediction for the same options, and the agreement check.
//
// The replay is exact to the byte on today's code; the tolerance leaves room for benign drift (a
// new small temporary) and is far tighter than anything an op could newly keep for backward at
// these shapes (gpt_memory_test.cpp checks that halving the attention probabilities would fail).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>

#include "mixtrain/models/gpt_memory.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::gpt_memory_test {

constexpr double kRelTol = 0.02;                  // of the measured bytes
constexpr int64_t kAbsSlack = int64_t{64} << 10;  // for the tiny categories (data, a few rows)

inline int64_t allowed(int64_t measured) {
  return static_cast<int64_t>(kRelTol * static_cast<double>(measured)) + kAbsSlack;
}

struct Case {
  PrecisionMode mode;
  int64_t B, T;
  bool ckpt;
  std::string optimizer;
  UpdateRounding rounding = UpdateRounding::nearest;
  std::string model = "gpt-nano";
  int64_t grad_accum = 1;
};

inline std::string name_of(const Case& c) {
  std::string s(precision_spec(c.mode).name);
  s += "_B" + std::to_string(c.B) + "_T" + std::to_string(c.T);
  s += c.ckpt ? "_ckpt_" : "_";
  s += c.optimizer;
  if (c.rounding != UpdateRounding::nearest) {
    s += '_';
    s += update_rounding_name(c.rounding);
  }
  if (c.grad_accum > 1) s += "_accum" + std::to_string(c.grad_accum);
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

// gtest prints parameters in test names and listings.
inline void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

struct Compared {
  GptMemoryPrediction predicted;
  MemorySnapshot measured;
};

inline Compared run(const Case& c) {
  TrainOptions o;
  o.model = c.model;
  o.precision = c.mode;
  o.batch_size = c.B;
  o.seq_len = c.T;
  o.checkpoint_activations = c.ckpt;
  o.optimizer = parse_optimizer_kind(c.optimizer);
  o.update_rounding = c.rounding;
  o.grad_accum = c.grad_accum;
  o.steps = 2;  // the second step is the steady state (working copy instead of cast weights)
  o.eval_batches = 1;
  o.quiet = true;
  o.measure_gemm_rate = false;
  Compared r;
  r.predicted = predict_gpt_memory(GptConfig::from_preset_or_file(c.model), memory_options(o));
  try {
    train(o);
  } catch (const DivergedError&) {
    // The steps ran (16-true may lose its loss to overflow); their memory is what is compared.
  }
  r.measured = MemoryTracker::global().snapshot();
  return r;
}

inline void expect_agree(const Compared& r, const std::string& what) {
  const GptMemoryPrediction& p = r.predicted;
  EXPECT_LE(std::llabs(p.peak_bytes - r.measured.peak_total), allowed(r.measured.peak_total))
      << what << ": peak total predicted " << p.peak_bytes << ", measured " << r.measured.peak_total
      << " (predicted peak at " << p.peak_moment << ")";
  for (size_t c = 0; c < kNumMemCategories; ++c)
    EXPECT_LE(std::llabs(p.peak_by_category[c] - r.measured.peak[c]), allowed(r.measured.peak[c]))
        << what << ": " << mem_category_name(static_cast<MemCategory>(c)) << " predicted "
        << p.peak_by_category[c] << ", measured " << r.measured.peak[c];
}

}  // namespace mixtrain::gpt_memory_test
