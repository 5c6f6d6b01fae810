// Training-step speed, MFU and the step time by kind of work (train/bench_train.h).
#include "mixtrain/train/bench_train.h"

#include "mixtrain/core/error.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain {
namespace {

BenchTrainRun run_one(const RunOptions& base, const BenchTaskRun& run, int threads) {
  set_num_threads(threads);
  RunOptions o = base;
  o.quiet = true;
  o.profile = true;
  o.eval_every = 0;
  const TrainSummary s = run(o);
  BenchTrainRun r;
  r.precision = s.precision;
  r.threads = threads;
  // The summary's tokens/s and FLOP/s cover every step; these cover the profiled ones.
  r.tokens_per_s = static_cast<double>(s.profiled_tokens) / s.profiled_seconds;
  r.model_flops_per_s = r.tokens_per_s * (s.model_flops_per_s / s.tokens_per_s);  // model FLOPs per token
  r.gemm_flops_per_s = s.gemm_flops_per_s;
  r.mfu = r.model_flops_per_s / s.gemm_flops_per_s;
  r.profiled_steps = s.profiled_steps;
  r.breakdown = s.breakdown_per_step();
  r.system_allocations_per_step = s.system_allocations_per_step();
  r.peak_bytes = s.memory.peak_total;
  return r;
}

}  // namespace

BenchTrainResult bench_task(const RunOptions& o, const BenchTaskRun& run, bool thread_scaling,
                            const std::function<void(const BenchTrainRun&)>& on_run) {
  if (!o.steps || *o.steps <= o.profile_warmup)
    throw ArgumentError({"steps", "profile_warmup"},
                        "steps " + (o.steps ? std::to_string(*o.steps) : std::string("(every epoch)")) +
                            " leaves no step after the " + std::to_string(o.profile_warmup) +
                            " warm-up steps (profile_warmup)");
  const int all = num_threads();
  struct RestoreThreads {
    int n;
    ~RestoreThreads() { set_num_threads(n); }
  } restore{all};  // also when a run throws
  BenchTrainResult result;
  result.run = run_one(o, run, all);
  if (on_run) on_run(result.run);
  if (thread_scaling && all > 1) {
    ThreadScaling ts;
    ts.one_thread = run_one(o, run, 1);
    if (on_run) on_run(ts.one_thread);
    ts.speedup = result.run.tokens_per_s / ts.one_thread.tokens_per_s;
    result.thread_scaling = ts;
  }
  return result;
}

BenchTrainResult bench_train(const TrainOptions& o, bool thread_scaling,
                             const std::function<void(const BenchTrainRun&)>& on_run) {
  return bench_task(o, train_with(o), thread_scaling, on_run);
}

}  // namespace mixtrain
