// Data parallelism (train/data_parallel.h) without MPI: a recording communicator stands in for two
// ranks that computed the same gradients (each sum doubles its data), so the hook's bucket order,
// coverage, overlap with backward and the bf16 path can be checked in one process. The
// multi-process runs themselves (exactness against grad_accum, agreement on skipped steps, rank 0
// outputs, a killed rank) are tests/cli/mpi_cli_test.sh.
#include "mixtrain/train/data_parallel.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dist/reduce_sum.h"
#include "mixtrain/amp/precision.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/optim/zero.h"
#include "mixtrain/train/trainer.h"
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
  // ZeRO: rank 0's piece is the first; its sum (x + x) stays where it is.
  void start_reduce_scatter(void* data, std::span<const int64_t> counts, DType dtype) override {
    events += 'R';
    EXPECT_EQ(counts.size(), 2u);
    int64_t n = 0;
    for (int64_t c : counts) n += c;
    started.push_back({static_cast<char*>(data), counts[0], dtype});
    scattered.push_back({static_cast<char*>(data), n, dtype});
  }
  // (int8 pieces: the twin's piece of this rank's part is not known here; it arrives as zeros.)
  void start_all_to_all(const void*, std::span<const int64_t>, void* recv,
                        std::span<const int64_t> recv_bytes) override {
    events += 'A';
    int64_t n = 0;
    for (int64_t b : recv_bytes) n += b;
    std::memset(recv, 0, static_cast<size_t>(n));
  }
  void progress() override { events += 'P'; }
  void wait_all() override {
    events += 'W';
    for (const Started& s : started) dist::sum_into(s.data, s.data, s.n, s.dtype);  // x + x
    all.insert(all.end(), started.begin(), started.end());
    started.clear();
  }
  void wait_oldest(size_t n) override {
    events += 'O';
    n = std::min(n, started.size());
    for (size_t k = 0; k < n; ++k)
      dist::sum_into(started[k].data, started[k].data, started[k].n, started[k].dtype);
    all.insert(all.end(), started.begin(), started.begin() + static_cast<std::ptrdiff_t>(n));
    started.erase(started.begin(), started.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // The twin's part would come from rank 1: here it stays as it is.
  void all_gather(void*, std::span<const int64_t> bytes) override {
    events += 'G';
    gathered.emplace_back(bytes.begin(), bytes.end());
  }
  void gather(const void* piece, void* all_out, std::span<const int64_t> bytes, int) override {
    std::memcpy(all_out, piece, static_cast<size_t>(bytes[0]));
  }
  struct Started {
    char* data;
    int64_t n;
    DType dtype;
  };
  std::vector<Started> started, all, scattered;
  std::vector<std::vector<int64_t>> gathered;  // the pieces' bytes of each all-gather
  // S: a sum started, R: a reduce-scatter started, P: progress (from the backward callback),
  // W: wait, G: an all-gather
  std::string events;
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
      void after_backward(TrainingRun& run, int64_t) override {
        *out = run.model().params().flat_grads().to_doubles();
      }
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
    if (reduce == DType::bf16)
      EXPECT_EQ(bf16_values, nonzero);
    else
      EXPECT_LT(bf16_values, nonzero / 2);
  }
}

// ZeRO stage 1: every bucket is reduce-scattered (rank 0's piece: the bucket's part inside rank
// 0's part of the arena), the buckets cover the buffer, the optimizer keeps state for rank 0's
// part only, and each step all-gathers the norm's block sums, then every rank's part of the weights.
TEST(DataParallel, ZeroReduceScattersEachBucketIntoTheRanksParts) {
  TwinRanks twins;
  TrainOptions o = train_test::tiny_run();
  o.steps = 2;
  o.world = &twins;
  o.data_parallel.zero_stage = 1;
  o.data_parallel.bucket_bytes = 16 << 10;
  const char* grads = nullptr;
  int64_t flat = 0, state_bytes = 0;
  struct Watch final : TrainingHook {
    int64_t* state_bytes = nullptr;
    void on_run_end(TrainingRun& run, TrainSummary&) override {
      *state_bytes = run.optimizer().state_bytes();
    }
  };
  o.add_hooks = [&](TrainingRun& run) {
    grads = static_cast<const char*>(run.model().params().flat_grads().raw_data());
    flat = run.model().params().flat_numel();
    auto w = std::make_unique<Watch>();
    w->state_bytes = &state_bytes;
    run.add_hook(std::move(w));
  };
  const TrainSummary s = train(o);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.zero_stage, 1);
  ASSERT_EQ(s.rank_peaks.size(), 2u);
  const ZeroPartition part = zero_partition(flat, 2, 0);
  ASSERT_GT(part.shards[1].size(), 0) << "the tiny model should span two parts";
  EXPECT_EQ(twins.events.find('S'), std::string::npos) << "an all-reduce under zero 1: " << twins.events;
  ASSERT_EQ(twins.scattered.size(), twins.all.size());
  ASSERT_EQ(twins.scattered.size() % 2, 0u);
  const size_t per_step = twins.scattered.size() / 2;
  ASSERT_GT(per_step, 2u) << "expected several buckets";
  for (size_t step = 0; step < 2; ++step) {
    int64_t end = flat;
    for (size_t b = 0; b < per_step; ++b) {
      const auto& k = twins.scattered[step * per_step + b];
      const int64_t begin = (k.data - grads) / 4;
      EXPECT_EQ(begin + k.n, end) << "bucket " << b << " of step " << step + 1;
      const int64_t mine =
          std::max<int64_t>(0, std::min(end, part.mine().end) - std::max(begin, part.mine().begin));
      EXPECT_EQ(twins.all[step * per_step + b].n, mine) << "rank 0's piece of bucket " << b;
      end = begin;
    }
    EXPECT_EQ(end, 0);
  }
  EXPECT_EQ(state_bytes, 8 * part.mine().size());  // AdamW's fp32 m and v, rank 0's part only
  // Per step two all-gathers: the gradient norm's block sums (doubles), then the updated weights.
  ASSERT_EQ(twins.gathered.size(), 4u);
  for (size_t step = 0; step < 2; ++step) {
    EXPECT_EQ(twins.gathered[2 * step], (std::vector<int64_t>{8 * part.blocks(0), 8 * part.blocks(1)}));
    EXPECT_EQ(twins.gathered[2 * step + 1],
              (std::vector<int64_t>{4 * part.shards[0].size(), 4 * part.shards[1].size()}));
  }
  EXPECT_EQ(twins.events.find('G'), twins.events.find('W') + 1)
      << "the norm's gather after the reduce-scatters";
}

// ZeRO-2: the same sums as ZeRO-1's (twins: every piece doubles), so the same trajectory bit for bit,
// while the gradient arena is memory only in rank 0's part: no page after it was ever written
// (mincore: not resident), each bucket's gradients travel from a buffer of their own, and the
// tracker charges the part plus the buckets held, less than the arena.
TEST(DataParallel, Zero2HoldsOnlyItsPartOfTheGradientsAndMatchesZero1) {
  for (PrecisionMode mode : {PrecisionMode::true32, PrecisionMode::mixed_bf16, PrecisionMode::true_bf16}) {
    std::vector<std::vector<double>> logs;
    for (int stage : {1, 2}) {
      TwinRanks twins;
      TrainOptions o = train_test::tiny_run(mode);
      o.steps = 3;
      o.world = &twins;
      o.data_parallel.zero_stage = stage;
      o.data_parallel.bucket_bytes = 16 << 10;
      std::vector<double> log;
      int64_t resident_outside = -1, part_end = 0, flat = 0, elem = 0;
      struct Watch final : TrainingHook {
        std::vector<double>* log = nullptr;
        int64_t *resident_outside = nullptr, *part_end = nullptr, *flat = nullptr, *elem = nullptr;
        void after_update(TrainingRun& run, const StepRecord& r) override {
          log->insert(log->end(), {r.loss, r.grad_norm});
          const ParameterStore& store = run.model().params();
          const Tensor& g = store.flat_grads();
          *part_end = store.gradient_part().second;
          *flat = store.flat_numel();
          *elem = static_cast<int64_t>(dtype_size(g.dtype()));
          // Pages wholly after the part: resident ones were written.
          const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
          const auto base = reinterpret_cast<uintptr_t>(g.raw_data());
          const uintptr_t from = (base + static_cast<size_t>(*part_end * *elem) + page - 1) / page * page;
          const uintptr_t to = (base + g.nbytes()) / page * page;
          *resident_outside = 0;
          if (to > from) {
            std::vector<unsigned char> v((to - from) / page);
            ASSERT_EQ(mincore(reinterpret_cast<void*>(from), to - from, v.data()), 0);
            for (unsigned char c : v) *resident_outside += c & 1;
          }
        }
      };
      o.add_hooks = [&](TrainingRun& run) {
        auto w = std::make_unique<Watch>();
        w->log = &log;
        w->resident_outside = &resident_outside;
        w->part_end = &part_end;
        w->flat = &flat;
        w->elem = &elem;
        run.add_hook(std::move(w));
      };
      const TrainSummary s = train(o);
      EXPECT_EQ(s.zero_stage, stage);
      const ZeroPartition part = zero_partition(flat, 2, 0);
      if (stage == 2) {
        EXPECT_EQ(part_end, part.mine().end);
        EXPECT_EQ(resident_outside, 0)
            << precision_spec(mode).name << ": pages of the arena outside the part written";
        // (This rank's tracker: the twins' sum doubles the summary's rank_peaks.)
        const int64_t g = s.memory.peak[static_cast<size_t>(MemCategory::gradients)];
        EXPECT_GT(g, part.mine().size() * elem) << precision_spec(mode).name;
        EXPECT_LT(g, flat * elem) << precision_spec(mode).name << ": the whole gradient arena held";
        EXPECT_EQ(twins.events.find('S'), std::string::npos) << "an all-reduce under zero 2";
      } else {
        EXPECT_EQ(part_end, flat);  // ZeRO-1 holds the whole buffer
      }
      logs.push_back(log);
    }
    ASSERT_EQ(logs[0].size(), 6u);
    for (size_t i = 0; i < logs[0].size(); ++i)
      EXPECT_EQ(logs[0][i], logs[1][i])
          << precision_spec(mode).name << ": step " << i / 2 + 1 << (i % 2 ? " grad norm" : " loss");
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

// Compressed parameter gathers are ZeRO-3's: refused under another stage, naming both fields; a
// dtype that is not a wire dtype is refused too.
TEST(DataParallel, CompressedGathersNeedZero3) {
  DataParallelConfig c;
  for (const DType wire : {DType::bf16, DType::i8, DType::f8_e4m3}) {
    c.allgather_dtype = wire;
    for (const int stage : {0, 1, 2}) {
      c.zero_stage = stage;
      try {
        c.validate(DType::f32);
        FAIL() << "no error at stage " << stage;
      } catch (const ArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find("allgather_dtype"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("zero 3"), std::string::npos) << e.what();
      }
    }
    c.zero_stage = 3;
    EXPECT_NO_THROW(c.validate(DType::f32));
    EXPECT_NO_THROW(c.validate(DType::bf16));
  }
  c.allgather_dtype = DType::f16;
  EXPECT_THROW(c.validate(DType::f32), ArgumentError);
  c.allgather_dtype = DType::f32;
  c.zero_stage = 1;
  EXPECT_NO_THROW(c.validate(DType::f32));
}

}  // namespace
}  // namespace mixtrain
