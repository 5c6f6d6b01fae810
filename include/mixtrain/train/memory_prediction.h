// The memory a training run will need, predicted by running it on the meta device
// (tensor/device.h): the real model, optimizer, MixedPrecision and TrainingRun, with tensors that
// have shapes, dtypes and memory categories but no storage, and ops that allocate what the CPU
// kernels allocate but compute nothing (PyTorch's meta tensors, ggml's measure graph). No model
// has code of its own for this: whatever a run allocates on the CPU it allocates on meta.
//
//   TrainOptions o;  // model, precision, batch_size, seq_len, ...
//   MemoryPrediction p = predict_train_memory(o);  // train/trainer.h
//   p.peak_bytes, p.peak_by_category, p.peak_moment, p.terms (alive at the peak, largest first)
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixtrain/tensor/memory.h"

namespace mixtrain {

struct MemoryTerm {
  std::string name;  // module (layer numbers as *), op, shape and dtype, e.g.
                     // "transformer.h.*.mlp.c_fc linear [8, 128, 1024] bf16"
  MemCategory category = MemCategory::other;
  int64_t count = 0;  // tensors of this name alive at the moment
  int64_t bytes = 0;  // their bytes together
};

struct MemoryPrediction {
  int64_t peak_bytes = 0;                                     // peak of the sum over the categories
  std::array<int64_t, kNumMemCategories> peak_by_category{};  // each category's own peak
  std::array<int64_t, kNumMemCategories> at_peak{};           // live bytes per category at the total peak
  std::string peak_moment;        // e.g. "step 2 backward, transformer.h.3.mlp.c_fc linear"
  std::vector<MemoryTerm> terms;  // what is alive at the total peak, largest first
  int64_t parameters = 0;         // the model's parameter count
  // What was not modelled, for the report (e.g. oneDNN's own memory outside its scratchpad).
  std::vector<std::string> notes;
};

// Runs `run` with the meta device as this thread's default device and returns the peaks the meta
// tracker saw (its peaks are reset first) and what was alive at the total peak. `run` must create
// its tensors on the default device (everything in mixtrain does) and not read their values (a
// meta value reads as zero). One prediction at a time per process (they are serialized).
MemoryPrediction predict_memory(const std::function<void()>& run);

// The run train(o) makes, predicted: predict_train_memory (train/trainer.h).

}  // namespace mixtrain
