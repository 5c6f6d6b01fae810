// `mixtrain bench train` as a function: the speed of a training step and where its time goes.
// Trains with the given options, the first profile_warmup steps left out of the measurement, and
// reports tokens/s, model FLOP/s, the GEMM rate of the mode's dtype measured in the same run, MFU,
// the step time by kind of work (core/profiler.h) and system allocations per steady-state step;
// with thread scaling, the same again at one thread.
//
//   TrainOptions o;  // steps > profile_warmup
//   BenchTrainResult r = bench_train(o, /*thread_scaling=*/true);
//   r.run.mfu, r.run.breakdown.work[size_t(WorkKind::gemm)], r.thread_scaling->speedup
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "mixtrain/train/train_options.h"

namespace mixtrain {

// One measured run, over its profiled (steady-state) steps.
struct BenchTrainRun {
  std::string precision;
  int threads = 0;
  double tokens_per_s = 0;
  double model_flops_per_s = 0;
  double gemm_flops_per_s = 0;  // a 1024^3 GEMM in the mode's compute dtype, on this machine now
  double mfu = 0;               // model_flops_per_s / gemm_flops_per_s
  int64_t profiled_steps = 0;
  StepBreakdown breakdown;  // seconds per profiled step
  double system_allocations_per_step = 0;
  int64_t peak_bytes = 0;  // the tracker's peak total over the whole run
};

struct ThreadScaling {
  BenchTrainRun one_thread;
  double speedup = 0;  // tokens/s at all threads over tokens/s at one
};

struct BenchTrainResult {
  BenchTrainRun run;                            // at all threads (num_threads())
  std::optional<ThreadScaling> thread_scaling;  // when asked for and more than one thread is available
};

// Runs `o` quietly with profiling on and no intermediate evaluation, at num_threads() and, with
// `thread_scaling`, at one thread (then num_threads() is what it was). `on_run` sees each run as
// soon as it finished. Throws ArgumentError when o.steps leaves no step after o.profile_warmup,
// or for bad options.
BenchTrainResult bench_train(const TrainOptions& o, bool thread_scaling,
                             const std::function<void(const BenchTrainRun&)>& on_run = {});

// The same for any task: `run` runs it with the given options (train() above; a fine-tune's is
// bench_finetune, train/finetune.h) and returns its summary.
using BenchTaskRun = std::function<TrainSummary(const RunOptions&)>;
BenchTrainResult bench_task(const RunOptions& o, const BenchTaskRun& run, bool thread_scaling,
                            const std::function<void(const BenchTrainRun&)>& on_run = {});

}  // namespace mixtrain
