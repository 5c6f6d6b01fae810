// `mixtrain memory` as a function: how much memory a training run needs. The prediction: the run
// made on the meta device (train/memory_prediction.h: no tensor memory held, nothing computed)
// and, unless only the prediction is asked for, the peaks the allocator's tracker measures over a real run of
// train() with the same options, with the relative error per category and the process's peak RSS.
//
//   TrainOptions o;  // model, precision, batch_size, seq_len, steps, ...
//   MemoryReport r = memory_report(o, /*predict_only=*/false);
//   r.predicted.peak_bytes, r.measured->peaks.peak_total, r.measured->peak_error
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>

#include "mixtrain/models/gpt.h"
#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/train_options.h"

namespace mixtrain {

// (predicted - measured) / measured: 0 when both are 0, NaN when only the prediction is not.
double relative_error(int64_t predicted, int64_t measured);

struct MeasuredMemory {
  MemorySnapshot peaks;                // the tracker right after the run (train() reset its peaks)
  int64_t process_peak_rss_bytes = 0;  // getrusage: adds the allocator's cache, code, the corpus
  double peak_error = 0;               // relative_error of the predicted peak total
  std::array<double, kNumMemCategories> error_by_category{};  // relative_error of each category's peak
};

struct MemoryReport {
  GptConfig model;      // memory_report's (a GPT); task_memory_report leaves it as it is
  int64_t seq_len = 0;  // the options' seq_len, or the model's block size (memory_report)
  MemoryPrediction predicted;
  std::optional<MeasuredMemory> measured;  // none with predict_only
};

// The prediction for `o` and, unless `predict_only`, its measurement: `o`'s steps trained quietly
// without the final GEMM-rate measurement (whose 1024^3 operands would enter the peaks); a run that
// diverges is still measured. Throws ArgumentError for a bad model or bad options (with
// predict_only, only what the prediction needs is checked), IoError for an unreadable config.
// ranks > 1: the prediction is one rank's of a data-parallel run of that many ranks (rank 0, whose
// ZeRO part is the largest; o.data_parallel.zero_stage applies), made through a MetaWorld
// (dist/communicator.h); the measurement is this process's own, in the world o.world (under
// mpirun, o.world's size must then be `ranks`).
MemoryReport memory_report(const TrainOptions& o, bool predict_only, int ranks = 1);

// The same for any task: `run` runs it with the given options (train() for memory_report; a
// fine-tune's: finetune_memory_report, train/finetune.h) and returns its summary.
using MemoryTaskRun = std::function<TrainSummary(const RunOptions&)>;
MemoryReport task_memory_report(const RunOptions& o, bool predict_only, int ranks, const MemoryTaskRun& run);

}  // namespace mixtrain
