// Data parallelism (train/data_parallel.h) without MPI: a recording communicator stands in for two
// ranks that computed the same gradients (each sum doubles its data), so the hook's bucket order,
// coverage, overlap with backward and the bf16 path can be checked in one process. The
// multi-process runs themselves (exactness against grad_accum, agreement on skipped steps, rank 0
// outputs, a killed rank) are tests/cli/mpi_cli_test.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dist/reduce_sum.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/train/data_parallel.h"
#include "train/tiny_run.h"

namespace mixtrain {
namespace {

// Rank 0 of two identical ranks: every sum doubles, a broadcast changes nothing.
class TwinRanks final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* name() const override { return "twin ranks"; }
  void broadcast(void*, size_t bytes, int root) override {
    broadcast_bytes += bytes;
    EXPECT_EQ(root, 0);
  }
  void sum(std::span<double> v) override {
    for (double& x : v) x *= 2;
  }
  int64_t max(int64_t value) override { return value; }
  void start_sum(void* data, int64_t n, DType dtype) override {
    events += 'S';
    started.push_back({static_cast<char*>(data), n, dtype});
  }
  void progress() override { events += 'P'; }
  void wait_all() override {
    events += 'W';
    for (const Started& s : started) dist::sum_into(s.data, s.data, s.n, s.dtype);  // x + x
    all.insert(all.end(), started.begin(), started.end());
    started.clear();
  }
  struct Started {
    char* data;
    int64_t n;
    DType dtype;
  };
  std::vector<Started> started, all;
  std::string events;  // S: a sum started, P: progress (from the backward callback), W: wait
  size_t broadcast_bytes = 0;
};

TEST(DataParallel, BucketsCoverTheGradientsInReverseOrderAndStartDuringBackward) {
  TwinRanks twins;
  TrainOptions o = train_test::tiny_run();
  o.steps = 2;
  o.grad_accum = 2;  // only the last micro-batch's backward may start a bucket
  o.world = &twins;
  o.data_parallel.bucket_bytes = 16 << 10;  // several buckets in gpt-nano
  const void* grads = nullptr;
  int64_t flat = 0;
  size_t param_bytes = 0;
  o.add_hooks = [&](TrainingRun& run) {
    grads = run.model().params().flat_grads().raw_data();
    flat = run.model().params().flat_numel();
    param_bytes = static_cast<size_t>(flat) * 4;
  };
  const TrainSummary s = train(o);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(twins.broadcast_bytes, param_bytes);  // rank 0's weights, once
  ASSERT_EQ(twins.all.size() % 2, 0u);
  const size_t per_step = twins.all.size() / 2;
  ASSERT_GT(per_step, 2u) << "expected several buckets";
  for (size_t step = 0; step < 2; ++step) {
    // Contiguous from the end of the buffer down to its start: every element summed once.
    int64_t end = flat;
    for (size_t b = 0; b < per_step; ++b) {
      const auto& k = twins.all[step * per_step + b];
      EXPECT_EQ(k.dtype, DType::f32);
      const int64_t begin = (k.data - static_cast<const char*>(grads)) / 4;
      EXPECT_EQ(begin + k.n, end) << "bucket " << b << " of step " << step + 1;
      end = begin;
    }
    EXPECT_EQ(end, 0);
  }
  // Overlap: in each step the first bucket starts while backward still runs (a later parameter's
  // callback, P, comes between the first and the last start, S).
  size_t from = 0;
  for (int step = 0; step < 2; ++step) {
    const size_t w = twins.events.find('W', from);
    ASSERT_NE(w, std::string::npos);
    const std::string this_step = twins.events.substr(from, w - from);
    const size_t first_s = this_step.find('S'), last_s = this_step.rfind('S');
    ASSERT_NE(first_s, std::string::npos);
    const size_t p = this_step.find('P', first_s);
    EXPECT_TRUE(p != std::string::npos && p < last_s) << "no bucket started during backward: " << this_step;
    from = w + 1;
  }
}

TEST(DataParallel, SumsTheGradientBufferAndRoundsThroughBf16WhenAsked) {
  for (DType reduce : {DType::f32, DType::bf16}) {
    TwinRanks twins;
    TrainOptions o = train_test::tiny_run();
    o.steps = 1;
    o.world = &twins;
    o.data_parallel.reduce_dtype = reduce;
    std::vector<double> summed;
    struct Capture final : TrainingHook {
      std::vector<double>* out = nullptr;
      void after_backward(TrainingRun& run, int64_t) override { *out = run.model().params().flat_grads().to_doubles(); }
    };
    o.add_hooks = [&](TrainingRun& run) {
      auto c = std::make_unique<Capture>();
      c->out = &summed;
      run.add_hook(std::move(c));
    };
    train(o);
    ASSERT_FALSE(twins.all.empty());
    for (const auto& k : twins.all) EXPECT_EQ(k.dtype, reduce);
    // Each summed element is twice this rank's gradient: in bf16, twice a bf16 value. Plain fp32
    // gradients are rarely bf16 values, which tells the two paths apart.
    int64_t nonzero = 0, bf16_values = 0;
    for (double g : summed) {
      if (g == 0) continue;
      ++nonzero;
      const float half = static_cast<float>(g / 2);
      if (f32_from_bf16(bf16_from_f32(half)) == half) ++bf16_values;
    }
    ASSERT_GT(nonzero, 1000);
    if (reduce == DType::bf16) EXPECT_EQ(bf16_values, nonzero);
    else EXPECT_LT(bf16_values, nonzero / 2);
  }
}

TEST(DataParallel, RefusesBf16SumsOfFp16GradientsNamingTheFlag) {
  DataParallelConfig c;
  c.reduce_dtype = DType::bf16;
  EXPECT_NO_THROW(c.validate(DType::f32));
  EXPECT_NO_THROW(c.validate(DType::bf16));
  try {
    c.validate(DType::f16);
    FAIL() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("grad_reduce_dtype"), std::string::npos) << e.what();
  }
  c.reduce_dtype = DType::f32;
  c.bucket_bytes = 0;
  EXPECT_THROW(c.validate(DType::f32), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
