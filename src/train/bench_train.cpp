// Training-step speed, MFU and the step time by kind of work (train/bench_train.h).
#include "mixtrain/train/bench_train.h"

#include "train/model_config.h"

#include "mixtrain/core/error.h"
#include "kernels/backend.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {
namespace {

BenchTrainRun run_one(const TrainOptions& base, const GptConfig& cfg, int threads) {
  set_num_threads(threads);
  TrainOptions o = base;
  o.quiet = true;
  o.profile = true;
  o.eval_every = 0;
  const TrainSummary s = train(o);
  BenchTrainRun r;
  r.precision = s.precision;
  r.threads = threads;
  // The summary's tokens/s and FLOP/s cover every step; these cover the profiled ones.
  const int64_t T = o.seq_len > 0 ? o.seq_len : cfg.block_size;
  const double tokens = static_cast<double>(o.batch_size * T * o.grad_accum * s.profiled_steps);
  r.tokens_per_s = tokens / s.profiled_seconds;
  r.model_flops_per_s = r.tokens_per_s * (s.model_flops_per_s / s.tokens_per_s);  // model FLOPs per token
  r.gemm_flops_per_s = s.gemm_flops_per_s;
  r.mfu = r.model_flops_per_s / s.gemm_flops_per_s;
  r.profiled_steps = s.profiled_steps;
  r.breakdown = s.breakdown_per_step();
  r.system_allocations_per_step = s.system_allocations_per_step();
  r.peak_bytes = MemoryTracker::global().snapshot().peak_total;
  return r;
}

}  // namespace

BenchTrainResult bench_train(const TrainOptions& o, bool thread_scaling,
                             const std::function<void(const BenchTrainRun&)>& on_run) {
  if (o.steps <= o.profile_warmup)
    throw ArgumentError("bench_train: steps " + std::to_string(o.steps) + " leaves no step after the " +
                        std::to_string(o.profile_warmup) + " warm-up steps (profile_warmup)");
  const GptConfig cfg = load_model_config(o.model);
  const int all = num_threads();
  struct RestoreThreads {
    int n;
    ~RestoreThreads() { set_num_threads(n); }
  } restore{all};  // also when a run throws
  BenchTrainResult result;
  result.run = run_one(o, cfg, all);
  if (on_run) on_run(result.run);
  if (thread_scaling && all > 1) {
    ThreadScaling ts;
    ts.one_thread = run_one(o, cfg, 1);
    if (on_run) on_run(ts.one_thread);
    ts.speedup = result.run.tokens_per_s / ts.one_thread.tokens_per_s;
    result.thread_scaling = ts;
  }
  return result;
}

}  // namespace mixtrain
