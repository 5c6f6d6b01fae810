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
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "mixtrain/train/train_options.h"

namespace mixtrain {

// How far each kind of work is from this machine's limit, per profiled step. The GEMMs (and the
// attention op's GEMMs) against the rate this machine gives at the step's own GEMM problems, each
// timed again on its own after the run (kernels/gemm_info.h), and against the ISA's nominal peak;
// every other kind against the bytes it must move (core/profiler.h, ProfileScope::moves: inputs
// read once, outputs written once) at the triad bandwidth measured after the run
// (kernels/machine_limits.h). The allocator's time has no limit here (0).
struct Roofline {
  double triad_bytes_per_s = 0;
  double peak_flops_per_s = 0;  // ISA peak for the mode's GEMM dtype at the run's threads (0: clock unknown)
  std::string peak_basis;
  double peak_ghz = 0;
  int64_t gemm_problems = 0;        // distinct GEMM problems the step ran
  double gemm_flops = 0;            // per step, the gemm kind's GEMMs
  double attention_gemm_flops = 0;  // per step, the attention op's GEMMs
  double gemm_own_rate_s = 0;       // the gemm kind's GEMMs at their own measured rate
  double attention_gemm_own_rate_s = 0;
  std::array<int64_t, kNumWorkKinds> bytes{};  // per step
  std::array<double, kNumWorkKinds> limit{};   // seconds per step at the machine's limit
  double step_limit = 0;                       // the sum of the kinds' limits
  double mfu_peak = 0;                         // model FLOP/s over the ISA peak (0 when unknown)
};

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
  Roofline roofline;
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
