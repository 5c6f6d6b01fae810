// Shared by the memory-prediction tests: one training run of gpt-nano (train(), as `mixtrain
// memory` runs it) next to its prediction (the same run on the meta device), and the check that
// they agree to the byte: the peak total and every category's peak.
#pragma once
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::memory_prediction_test {

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

inline TrainOptions options(const Case& c) {
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
  return o;
}

struct Compared {
  MemoryPrediction predicted;
  MemorySnapshot measured;
};

inline Compared run(const Case& c) {
  const TrainOptions o = options(c);
  Compared r;
  r.predicted = predict_train_memory(o);
  try {
    train(o);
  } catch (const DivergedError&) {
    // The steps ran (16-true may lose its loss to overflow); their memory is what is compared.
  }
  r.measured = MemoryTracker::global().snapshot();
  return r;
}

inline void expect_agree(const Compared& r, const std::string& what) {
  const MemoryPrediction& p = r.predicted;
  EXPECT_EQ(p.peak_bytes, r.measured.peak_total) << what << " (predicted peak at " << p.peak_moment << ")";
  for (size_t c = 0; c < kNumMemCategories; ++c)
    EXPECT_EQ(p.peak_by_category[c], r.measured.peak[c])
        << what << ": " << mem_category_name(static_cast<MemCategory>(c));
  // What was alive at the predicted peak adds up to the peak.
  int64_t at_peak = 0;
  for (const MemoryTerm& t : p.terms) at_peak += t.bytes;
  EXPECT_EQ(at_peak, p.peak_bytes) << what;
}

}  // namespace mixtrain::memory_prediction_test
