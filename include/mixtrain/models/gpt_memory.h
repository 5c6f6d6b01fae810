// The memory a GPT training run will need, predicted from the model's shape alone (no tensor is
// allocated, nothing is trained): the answer to "will this fit?" that `mixtrain memory` prints
// beside the peaks measured by the allocator's tracker (tensor/memory.h).
//
// The prediction replays the run's allocations symbolically (src/models/gpt_memory.cpp): the same
// set-up, forward pass, autograd graph, backward walk and optimizer step as train/trainer.cpp,
// op by op, with byte counts in place of tensors. What a node keeps for backward follows the
// rule table's `reads_inputs` column (backward_reads_input) plus, per op, the extra tensors its
// forward saves (one function per op in the .cpp, each saying what it keeps and why). The peak
// total and each category's own peak come out of the replay, with the moment of the peak and the
// tensors alive then, by name.
//
// Dimension letters: B batch, T sequence, C n_embd, H n_head, D = C / H, L n_layer, V vocab.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/amp/precision.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {

// What shapes a run's memory (the rest of TrainOptions does not).
struct GptMemoryOptions {
  PrecisionMode precision = PrecisionMode::true32;
  int64_t batch_size = 16;
  int64_t seq_len = 0;  // 0: the model's block size
  bool checkpoint_activations = false;
  OptimizerKind optimizer = OptimizerKind::adamw;                           // adamw | sgd
  float momentum = 0.9f;                                     // sgd: 0 keeps no momentum buffer
  UpdateRounding update_rounding = UpdateRounding::nearest;  // kahan: a compensation buffer (*-true)
  int64_t grad_accum = 1;
  int64_t steps = 3;         // optimizer steps (the first one casts weights; later ones use the working copy)
  int64_t eval_batches = 1;  // the trainer's final evaluation (no-grad forward passes); 0: none
  void validate(const GptConfig& cfg) const;  // throws ArgumentError (e.g. seq_len > block_size)
};

struct MemoryTerm {
  std::string name;  // what the tensors are, e.g. "attention probabilities (B*H, T, T) bf16"
  MemCategory category = MemCategory::other;
  int64_t count = 0;  // tensors of this name alive at the moment
  int64_t bytes = 0;  // their bytes together
};

struct GptMemoryPrediction {
  int64_t peak_bytes = 0;                                     // peak of the sum over the categories
  std::array<int64_t, kNumMemCategories> peak_by_category{};  // each category's own peak
  std::array<int64_t, kNumMemCategories> at_peak{};           // live bytes per category at the total peak
  std::string peak_moment;                                    // e.g. "step 2 backward, block 5 (recomputed)"
  std::vector<MemoryTerm> terms;  // what is alive at the total peak, largest first
  int64_t parameters = 0;         // parameter count (the tied lm_head counted once)
  int64_t flat_parameters = 0;    // elements of the flat arenas (with alignment padding)
  // What was not modelled, for the report (e.g. oneDNN's own GEMM scratchpad).
  std::vector<std::string> notes;
};

GptMemoryPrediction predict_gpt_memory(const GptConfig& cfg, const GptMemoryOptions& opt);

}  // namespace mixtrain
