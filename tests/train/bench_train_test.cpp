// bench_train (train/bench_train.h): the profiled steps' speed and breakdown, and the thread
// scaling run at one thread.
#include "mixtrain/train/bench_train.h"

#include <gtest/gtest.h>

#include <vector>

#include "checkpoint/checkpoint_test_util.h"
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

}  // namespace
}  // namespace mixtrain
