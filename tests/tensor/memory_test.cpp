// Memory accounting: live and peak bytes per category follow allocations exactly, and agree with
// the process's own peak RSS.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mixtrain/tensor/tensor.h"

using namespace mixtrain;

namespace {
int64_t live(MemCategory c) { return MemoryTracker::global().snapshot().live[static_cast<size_t>(c)]; }
int64_t peak(MemCategory c) { return MemoryTracker::global().snapshot().peak[static_cast<size_t>(c)]; }
}  // namespace

TEST(Memory, LiveAndPeakPerCategory) {
  MemoryTracker::global().reset_peaks();
  const int64_t p0 = live(MemCategory::parameters);
  const int64_t g0 = live(MemCategory::gradients);
  {
    Tensor w = Tensor::empty({1000, 10}, DType::bf16, MemCategory::parameters);
    EXPECT_EQ(live(MemCategory::parameters) - p0, 20000);
    {
      Tensor g = Tensor::zeros({1000, 10}, DType::f32, MemCategory::gradients);
      EXPECT_EQ(live(MemCategory::gradients) - g0, 40000);
      Tensor view = g.slice(0, 0, 10);  // views allocate nothing
      EXPECT_EQ(live(MemCategory::gradients) - g0, 40000);
    }
    EXPECT_EQ(live(MemCategory::gradients), g0);
    EXPECT_GE(peak(MemCategory::gradients) - g0, 40000);
  }
  EXPECT_EQ(live(MemCategory::parameters), p0);
  const auto s = MemoryTracker::global().snapshot();
  EXPECT_GE(s.peak_total, 60000);
}

// Tensor::reserved (ZeRO-2's gradient arena): zeros everywhere, memory and charge only where used.
// 64 MiB of address space, 1 MiB used: the tracker charges the MiB, the process's resident set
// grows by about it when those elements are written (not by 64 MiB), and on the meta device a
// prediction sees the used bytes alone.
TEST(Memory, ReservedTensorChargesAndHoldsOnlyItsUsedPart) {
  const int64_t g0 = live(MemCategory::gradients);
  const int64_t n = int64_t{16} << 20, used_begin = int64_t{4} << 20,
                used_end = used_begin + (int64_t{1} << 18);
  const int64_t rss0 = process_current_rss_bytes();
  {
    Tensor t = Tensor::reserved({n}, DType::f32, used_begin, used_end, MemCategory::gradients);
    EXPECT_EQ(live(MemCategory::gradients) - g0, (used_end - used_begin) * 4);
    EXPECT_EQ(t.numel(), n);
    float* d = t.data<float>();
    EXPECT_EQ(d[0], 0.f);
    EXPECT_EQ(d[n - 1], 0.f);
    for (int64_t i = used_begin; i < used_end; ++i) d[i] = 1.f;
    const int64_t grew = process_current_rss_bytes() - rss0;
    EXPECT_LT(grew, int64_t{8} << 20) << "more than the used MiB became resident";
    EXPECT_EQ(t.slice(0, used_begin, used_begin + 2).to_doubles(), (std::vector<double>{1, 1}));
  }
  EXPECT_EQ(live(MemCategory::gradients), g0);
  {
    const DeviceScope meta(Device::meta());
    const int64_t m0 = MemoryTracker::meta().snapshot().live[static_cast<size_t>(MemCategory::gradients)];
    Tensor t = Tensor::reserved({n}, DType::bf16, 0, 1000, MemCategory::gradients);
    EXPECT_EQ(MemoryTracker::meta().snapshot().live[static_cast<size_t>(MemCategory::gradients)] - m0, 2000);
  }
  EXPECT_THROW(Tensor::reserved({10}, DType::f32, 5, 11, MemCategory::gradients), ShapeError);
  EXPECT_THROW(Tensor::reserved({10}, DType::f32, 6, 5, MemCategory::gradients), ShapeError);
}

// ZeRO-3's gathered ranges (train/param_shards.h): commit charges a range of a reserved block while
// it is held, decommit uncharges it and gives back the pages wholly inside it (they read as zeros
// again; a page shared with a neighbour keeps its bytes), discard gives pages back without a charge.
TEST(Memory, ReservedRangesCommitAndDecommit) {
  const int64_t p0 = live(MemCategory::parameters);
  const int64_t n = int64_t{1} << 20, page = 4096 / 4;  // f32 elements, 1024 a page
  Tensor t = Tensor::reserved({n}, DType::f32, 0, page, MemCategory::parameters);
  Storage& st = *t.storage();
  EXPECT_EQ(live(MemCategory::parameters) - p0, page * 4);
  float* d = t.data<float>();
  // A range from mid-page 4 to mid-page 8: committed, written, decommitted.
  const int64_t b = 4 * page + 100, e = 8 * page + 100;
  st.commit(static_cast<size_t>(b * 4), static_cast<size_t>((e - b) * 4));
  EXPECT_EQ(live(MemCategory::parameters) - p0, (page + e - b) * 4);
  for (int64_t i = 0; i < 10 * page; ++i) d[i] = 1.f;
  st.decommit(static_cast<size_t>(b * 4), static_cast<size_t>((e - b) * 4));
  EXPECT_EQ(live(MemCategory::parameters) - p0, page * 4);
  EXPECT_EQ(d[b - 1], 1.f);     // page 4 is shared with what lies before the range: kept
  EXPECT_EQ(d[b], 1.f);         //   (its part inside the range too)
  EXPECT_EQ(d[5 * page], 0.f);  // pages 5, 6, 7: given back
  EXPECT_EQ(d[8 * page - 1], 0.f);
  EXPECT_EQ(d[8 * page + 100], 1.f);  // page 8 is shared with what follows: kept
  EXPECT_EQ(d[page - 1], 1.f);        // the used part: untouched
  // discard: the pages given back, no charge moved.
  st.discard(static_cast<size_t>(page * 4), static_cast<size_t>(3 * page * 4));
  EXPECT_EQ(d[page], 0.f);
  EXPECT_EQ(d[3 * page + 5], 0.f);
  EXPECT_EQ(d[4 * page], 1.f);
  EXPECT_EQ(live(MemCategory::parameters) - p0, page * 4);
  EXPECT_THROW(st.commit(static_cast<size_t>(n * 4), 4), ArgumentError);  // past the block
  Tensor plain = Tensor::zeros({16}, DType::f32, MemCategory::parameters);
  EXPECT_THROW(plain.storage()->commit(0, 4), ArgumentError);  // not a reserved block
  {
    const DeviceScope meta(Device::meta());
    const auto mlive = [] {
      return MemoryTracker::meta().snapshot().live[static_cast<size_t>(MemCategory::parameters)];
    };
    const int64_t m0 = mlive();
    Tensor m = Tensor::reserved({n}, DType::bf16, 0, 100, MemCategory::parameters);
    m.storage()->commit(1000, 600);
    m.storage()->commit(4000, 50);
    EXPECT_EQ(mlive() - m0, 200 + 600 + 50);
    m.storage()->decommit(1000, 600);
    EXPECT_EQ(mlive() - m0, 250);
    EXPECT_THROW(m.storage()->decommit(1000, 600), ArgumentError);  // not committed (any more)
    m = Tensor();  // what is still committed goes with the block
    EXPECT_EQ(mlive(), m0);
  }
}

TEST(Memory, RechargeMovesBytesBetweenCategories) {
  const int64_t a0 = live(MemCategory::activations), w0 = live(MemCategory::workspace);
  Tensor t = Tensor::empty({256}, DType::f32, MemCategory::workspace);
  EXPECT_EQ(live(MemCategory::workspace) - w0, 1024);
  t.storage()->recharge(MemCategory::activations);
  EXPECT_EQ(live(MemCategory::workspace), w0);
  EXPECT_EQ(live(MemCategory::activations) - a0, 1024);
}

// The tracker counts bytes requested; the process RSS counts pages touched, plus the program's
// own code, libraries and heap. After touching a large tracked allocation, the RSS growth must
// equal the tracked growth within 2%% + 8 MiB: the 8 MiB absorbs allocator metadata, the test
// framework and page rounding; 2%% absorbs transparent huge page rounding of the block edges.
TEST(Memory, TrackedPeakAgreesWithProcessRss) {
  const int64_t rss0 = process_peak_rss_bytes();
  MemoryTracker::global().reset_peaks();
  const int64_t tracked0 = MemoryTracker::global().snapshot().peak_total;
  const int64_t n = 64LL << 20;  // 64 Mi floats = 256 MiB
  {
    Tensor big = Tensor::empty({n}, DType::f32, MemCategory::activations);
    std::memset(big.raw_data(), 1, big.nbytes());  // touch every page
  }
  const int64_t tracked = MemoryTracker::global().snapshot().peak_total - tracked0;
  const int64_t rss = process_peak_rss_bytes() - rss0;
  EXPECT_EQ(tracked, n * 4);
  double margin = 0.02 * static_cast<double>(tracked) + 8.0 * (1 << 20);
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer keeps one shadow byte per 8 bytes of memory, touched by the memset too.
  margin += static_cast<double>(tracked) / 8;
#endif
  EXPECT_NEAR(static_cast<double>(rss), static_cast<double>(tracked), margin)
      << "tracked " << tracked << " bytes, RSS grew " << rss << " bytes";
}

// What made up the total peak: the live bytes by category when the total last rose to it, not
// each category's own peak (the gradients peaked later, when the total was lower).
TEST(Memory, AtPeakIsTheCompositionOfTheTotalPeak) {
  MemoryTracker::global().reset_peaks();
  const MemorySnapshot s0 = MemoryTracker::global().snapshot();
  const auto act = static_cast<size_t>(MemCategory::activations),
             ws = static_cast<size_t>(MemCategory::workspace),
             gr = static_cast<size_t>(MemCategory::gradients);
  EXPECT_EQ(s0.at_peak[act], s0.live[act]);  // restarted from the live bytes
  {
    Tensor a = Tensor::empty({1 << 18}, DType::f32, MemCategory::activations);    // 1 MiB
    { Tensor w = Tensor::empty({1 << 19}, DType::f32, MemCategory::workspace); }  // 2 MiB, the peak
    Tensor g = Tensor::empty({1 << 17}, DType::f32, MemCategory::gradients);      // 0.5 MiB, lower
    const MemorySnapshot s = MemoryTracker::global().snapshot();
    EXPECT_EQ(s.peak_total - s0.live_total, 3 << 20);
    EXPECT_EQ(s.at_peak[act] - s0.live[act], 1 << 20);
    EXPECT_EQ(s.at_peak[ws] - s0.live[ws], 2 << 20);
    EXPECT_EQ(s.at_peak[gr] - s0.live[gr], 0);
    EXPECT_EQ(s.peak[gr] - s0.live[gr], 1 << 19);
    int64_t sum = 0;
    for (int64_t b : s.at_peak) sum += b;
    EXPECT_EQ(sum, s.peak_total);
  }
}

// A run's own resident peak: the high-water mark restarts from the current resident size
// (/proc/self/clear_refs), so an earlier phase's peak is not the run's.
TEST(Memory, TheProcessPeakRssRestarts) {
  const int64_t n = 32LL << 20;  // 32 Mi floats = 128 MiB, touched, then given back to the system
  {
    std::vector<float> big(static_cast<size_t>(n), 1.f);
    EXPECT_GE(process_peak_rss_bytes(), n * 4);
  }
  const ProcessMemory m = process_memory_at_start();
  ASSERT_TRUE(m.peak_from_start) << "Linux refused to restart the resident high-water mark";
  EXPECT_GT(m.fixed_bytes, 0);
  EXPECT_LT(process_peak_rss_bytes(), process_current_rss_bytes() + (n * 4) / 2);
  ProcessMemory end = m;
  process_memory_at_end(end);
  EXPECT_GT(end.peak_rss_bytes, 0);
}

// Freed blocks are reused by exact size (no new system allocation), are not counted as live
// bytes, and can be given back.
TEST(Memory, AllocatorReusesFreedBlocksOfTheSameSize) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "the block cache is off under AddressSanitizer (so use-after-free stays detectable)";
#else
  cpu_allocator_release_cached();
  const int64_t live0 = MemoryTracker::global().snapshot().live_total;
  { Tensor a = Tensor::empty({12345}, DType::f32, MemCategory::workspace); }
  const AllocatorStats s1 = cpu_allocator_stats();
  EXPECT_GE(s1.cached_bytes, 12345 * 4);
  EXPECT_EQ(MemoryTracker::global().snapshot().live_total, live0);  // cached bytes are not live
  { Tensor b = Tensor::empty({12345}, DType::f32, MemCategory::activations); }
  const AllocatorStats s2 = cpu_allocator_stats();
  EXPECT_EQ(s2.system_allocations, s1.system_allocations);  // served from the cache
  EXPECT_EQ(s2.cache_hits, s1.cache_hits + 1);
  cpu_allocator_release_cached();
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0);
#endif
}

// A large request takes the smallest cached block up to twice its size (dynamic padding: the next
// batch is shorter), and not one larger than that.
TEST(Memory, AllocatorServesALargeRequestFromACachedBlockUpToTwiceItsSize) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "the block cache is off under AddressSanitizer (so use-after-free stays detectable)";
#else
  cpu_allocator_release_cached();
  const int64_t mib = int64_t{1} << 20;
  { Tensor big = Tensor::empty({4 * mib}, DType::i8, MemCategory::workspace); }  // 4 MiB, cached
  const AllocatorStats s0 = cpu_allocator_stats();
  ASSERT_GE(s0.cached_bytes, 4 * mib);
  {  // 2.25 MiB: the 4 MiB block is within twice its size
    Tensor t = Tensor::empty({9 * mib / 4}, DType::i8, MemCategory::workspace);
    const AllocatorStats s1 = cpu_allocator_stats();
    EXPECT_EQ(s1.system_allocations, s0.system_allocations);
    EXPECT_EQ(s1.cache_hits, s0.cache_hits + 1);
  }
  {  // 1.5 MiB: 4 MiB is more than twice that, so the system is asked
    const AllocatorStats s2 = cpu_allocator_stats();
    Tensor t = Tensor::empty({3 * mib / 2}, DType::i8, MemCategory::workspace);
    EXPECT_EQ(cpu_allocator_stats().system_allocations, s2.system_allocations + 1);
  }
  cpu_allocator_release_cached();
#endif
}
