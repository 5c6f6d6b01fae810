// Training-step speed, MFU and the step time by kind of work (train/bench_train.h).
#include "mixtrain/train/bench_train.h"

#include <algorithm>

#include "mixtrain/core/error.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/machine_limits.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain {
namespace {

// After the run: its GEMM problems timed on their own, the triad, the ISA peak (bench_train.h).
// The GEMMs are timed again under the run's fp32 matmul precision (medium: bf16 products on AMX),
// and an fp32 model whose GEMMs run bf16 products is held against the bf16 peak.
Roofline roofline_of(const TrainSummary& s, DType gemm_dtype, MatmulPrecision precision, int threads,
                     double model_flops_per_s) {
  const MatmulPrecisionScope scope(precision);
  Roofline r;
  const double steps = static_cast<double>(s.profiled_steps);
  r.triad_bytes_per_s = measure_triad_bytes_per_s(0.3);
  const bool bf16_products = gemm_dtype == DType::f32 && matmul_precision_uses_bf16(precision);
  const IsaPeak peak = isa_peak(bf16_products ? DType::bf16 : gemm_dtype);
  r.peak_flops_per_s = peak.flops_per_s(threads);
  r.peak_basis = peak.basis;
  r.peak_ghz = peak.ghz;
  const std::vector<GemmProblemCalls> problems = profiled_gemm_problems();
  r.gemm_problems = static_cast<int64_t>(problems.size());
  for (const GemmProblemCalls& pc : problems) {
    const double calls = static_cast<double>(pc.calls) / steps;
    const double t = time_gemm_problem(pc.problem, 0.05) * calls;
    const double flops = pc.problem.flops() * calls;
    if (pc.problem.kind == WorkKind::attention) {
      r.attention_gemm_own_rate_s += t;
      r.attention_gemm_flops += flops;
    } else {
      r.gemm_own_rate_s += t;
      r.gemm_flops += flops;
    }
  }
  for (size_t k = 0; k < kNumWorkKinds; ++k) {
    r.bytes[k] = static_cast<int64_t>(static_cast<double>(s.profiled_bytes[k]) / steps);
    const auto kind = static_cast<WorkKind>(k);
    const double memory = static_cast<double>(r.bytes[k]) / r.triad_bytes_per_s;
    if (kind == WorkKind::gemm)
      r.limit[k] = std::max(r.gemm_own_rate_s, memory);
    else if (kind == WorkKind::attention)
      r.limit[k] = r.attention_gemm_own_rate_s + memory;  // its GEMMs, then its softmax and copies
    else if (kind != WorkKind::allocator)
      r.limit[k] = memory;
    r.step_limit += r.limit[k];
  }
  r.mfu_peak = r.peak_flops_per_s > 0 ? model_flops_per_s / r.peak_flops_per_s : 0;
  return r;
}

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
  if (s.profiled_steps > 0)
    r.roofline = roofline_of(s, s.gemm_dtype, o.matmul_precision, threads, r.model_flops_per_s);
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
