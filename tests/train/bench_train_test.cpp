// bench_train (train/bench_train.h): the profiled steps' speed and breakdown, and the thread
// scaling run at one thread.
#include "mixtrain/train/bench_train.h"

#include <gtest/gtest.h>

#include <vector>

#include "checkpoint/checkpoint_test_util.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/machine_limits.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/threads.h"
#include "tiny_run.h"

namespace mixtrain {
namespace {

TrainOptions bench_run() {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_bf16);
  o.steps = 3;
  o.profile_warmup = 1;
  o.measure_gemm_rate = true;  // the MFU's denominator
  return o;
}

// Sets the thread count for one test and puts the old one back.
struct Threads {
  int old = num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(old); }
};

void expect_consistent(const BenchTrainRun& r, const TrainOptions& o, int threads) {
  EXPECT_EQ(r.precision, "bf16-mixed");
  EXPECT_EQ(r.threads, threads);
  EXPECT_EQ(r.profiled_steps, *o.steps - o.profile_warmup);
  ASSERT_GT(r.breakdown.step, 0);
  // tokens/s over the profiled steps only: B * T tokens per step, over the time per step.
  EXPECT_NEAR(r.tokens_per_s, static_cast<double>(o.batch_size * *o.seq_len) / r.breakdown.step,
              1e-9 * r.tokens_per_s);
  double known = r.breakdown.other;
  for (double s : r.breakdown.work) {
    EXPECT_GE(s, 0);
    known += s;
  }
  EXPECT_NEAR(known, r.breakdown.step, 1e-9 * r.breakdown.step);  // the kinds and "other" make up the step
  EXPECT_GT(r.breakdown.work[static_cast<size_t>(WorkKind::gemm)], 0);
  EXPECT_GT(r.model_flops_per_s, 0);
  EXPECT_GT(r.gemm_flops_per_s, 0);
  EXPECT_DOUBLE_EQ(r.mfu, r.model_flops_per_s / r.gemm_flops_per_s);
  EXPECT_GE(r.system_allocations_per_step, 0);
  EXPECT_GT(r.peak_bytes, 0);
  // The roofline: the limits measured, every kind of work but the allocator with bytes to move.
  const Roofline& rl = r.roofline;
  EXPECT_GT(rl.triad_bytes_per_s, 1e8);
  EXPECT_GT(rl.gemm_problems, 0);
  EXPECT_GT(rl.gemm_flops, 0);
  EXPECT_GT(rl.gemm_own_rate_s, 0);
  for (WorkKind k : {WorkKind::gemm, WorkKind::attention, WorkKind::normalization, WorkKind::elementwise,
                     WorkKind::loss, WorkKind::optimizer, WorkKind::scaler}) {
    EXPECT_GT(rl.bytes[static_cast<size_t>(k)], 0) << work_kind_name(k);
    EXPECT_GT(rl.limit[static_cast<size_t>(k)], 0) << work_kind_name(k);
  }
  EXPECT_EQ(rl.limit[static_cast<size_t>(WorkKind::allocator)], 0);
  double sum = 0;
  for (double l : rl.limit) sum += l;
  EXPECT_DOUBLE_EQ(rl.step_limit, sum);
}

TEST(BenchTrain, ReportsTheProfiledSteps) {
  Threads t(2);
  const TrainOptions o = bench_run();
  std::vector<int> seen;
  const BenchTrainResult r = bench_train(o, /*thread_scaling=*/false,
                                         [&](const BenchTrainRun& run) { seen.push_back(run.threads); });
  EXPECT_EQ(seen, std::vector<int>{2});
  expect_consistent(r.run, o, 2);
  EXPECT_FALSE(r.thread_scaling.has_value());
}

TEST(BenchTrain, ThreadScalingRunsAgainAtOneThreadAndRestoresTheCount) {
  Threads t(2);
  const TrainOptions o = bench_run();
  std::vector<int> seen;
  const BenchTrainResult r =
      bench_train(o, /*thread_scaling=*/true, [&](const BenchTrainRun& run) { seen.push_back(run.threads); });
  EXPECT_EQ(seen, (std::vector<int>{2, 1}));
  EXPECT_EQ(num_threads(), 2);
  expect_consistent(r.run, o, 2);
  ASSERT_TRUE(r.thread_scaling.has_value());
  expect_consistent(r.thread_scaling->one_thread, o, 1);
  EXPECT_EQ(r.thread_scaling->speedup, r.run.tokens_per_s / r.thread_scaling->one_thread.tokens_per_s);
}

TEST(BenchTrain, NoThreadScalingOnOneThread) {
  Threads t(1);
  const BenchTrainResult r = bench_train(bench_run(), /*thread_scaling=*/true);
  EXPECT_EQ(r.run.threads, 1);
  EXPECT_FALSE(r.thread_scaling.has_value());
}

TEST(BenchTrain, NeedsAStepAfterTheWarmUp) {
  TrainOptions o = bench_run();
  o.steps = 2;
  o.profile_warmup = 2;
  testing_ckpt::expect_error<ArgumentError>([&] { bench_train(o, false); }, {"steps 2", "profile_warmup"});
  o.steps = 3;
  o.model = "gpt-huge";
  testing_ckpt::expect_error<ArgumentError>([&] { bench_train(o, false); }, {"gpt-huge"});
}

// The bytes an op moves count once, in its outermost scope: matmul's output and inputs, not again
// for the gemm it calls; an op inside another kind's scope adds nothing of its own.
TEST(Profiler, CountsTheBytesOfTheOutermostOpOnly) {
  const Tensor a = Tensor::randn({8, 16}, DType::f32, 1, 0.f, 1.f);
  const Tensor b = Tensor::randn({16, 4}, DType::f32, 2, 0.f, 1.f);
  Profiler::reset();
  clear_profiled_gemm_problems();
  Profiler::set_enabled(true);
  Tensor c = matmul(a, b, false, false, DType::f32, MemCategory::activations);
  Tensor d = Tensor::empty({8, 4}, DType::f32);
  add(c, c, d);
  {
    ProfileScope outer(WorkKind::attention);
    gemm(a, b, c);  // inside "attention": its bytes are the outer op's (none given here)
  }
  Profiler::set_enabled(false);
  const auto bytes = Profiler::bytes();
  EXPECT_EQ(bytes[static_cast<size_t>(WorkKind::gemm)], (8 * 16 + 16 * 4 + 8 * 4) * 4);
  EXPECT_EQ(bytes[static_cast<size_t>(WorkKind::elementwise)], 3 * 8 * 4 * 4);
  EXPECT_EQ(bytes[static_cast<size_t>(WorkKind::attention)], 0);
  // Both GEMMs recorded as one problem each, by the kind of the op they ran in.
  const std::vector<GemmProblemCalls> p = profiled_gemm_problems();
  ASSERT_EQ(p.size(), 2u);
  int64_t calls = 0;
  for (const GemmProblemCalls& pc : p) {
    EXPECT_EQ(pc.problem.m, 8);
    EXPECT_EQ(pc.problem.n, 4);
    EXPECT_EQ(pc.problem.k, 16);
    EXPECT_EQ(pc.problem.flops(), 2.0 * 8 * 4 * 16);
    calls += pc.calls;
  }
  EXPECT_EQ(calls, 2);
  EXPECT_NE(p[0].problem.kind, p[1].problem.kind);
  EXPECT_GT(time_gemm_problem(p[0].problem, 0.001), 0);
  // Not profiling: nothing recorded.
  clear_profiled_gemm_problems();
  gemm(a, b, c);
  EXPECT_TRUE(profiled_gemm_problems().empty());
}

TEST(MachineLimits, TriadAndPeak) {
  EXPECT_GT(measure_triad_bytes_per_s(0.01, int64_t{4} << 20), 1e8);
  const IsaPeak f32 = isa_peak(DType::f32), bf16 = isa_peak(DType::bf16);
  EXPECT_GE(f32.flops_per_cycle, 8);
  EXPECT_GE(bf16.flops_per_cycle, f32.flops_per_cycle);  // never slower than its fp32 route
  EXPECT_FALSE(f32.basis.empty());
  EXPECT_DOUBLE_EQ(f32.flops_per_s(2), f32.flops_per_cycle * f32.ghz * 1e9 * 2);
}

}  // namespace
}  // namespace mixtrain
