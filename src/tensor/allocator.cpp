// The CPU allocator: 64-byte aligned blocks, charged to the memory tracker, with a cache of freed
// blocks. A training step frees and re-allocates the same activation sizes every step; serving
// them from the cache avoids asking the system again (which, for large blocks, means fresh pages
// that the kernel must zero on first touch: 11% of an fp32 step, see bench/RESULTS.md). The memory
// tracker counts live tensor bytes only; cached bytes are reported separately
// (cpu_allocator_stats). Under AddressSanitizer the cache is off, so a use after free is still
// caught.
//
// Shapes that change every batch (a fine-tune's dynamic padding) must not grow the process: an
// exact-size cache kept a block per shape (Fine Foods, bf16-mixed: 555 MB of tensors at the peak,
// 1.85 GB resident). So, as PyTorch's caching allocator does:
//   - large blocks (>= 1 MiB) come in size classes, 8 per doubling (at most 12.5% over the
//     request), straight from mmap, so a released block goes back to the system at once (glibc's
//     heap would keep it: its mmap threshold grows to 32 MiB after the first large free);
//   - a request takes a cached block of its class, or failing that the smallest cached block of
//     the next eight classes (best fit, at most 2x the request). Two classes (25%) were too few
//     for inference with dynamic padding: batch lengths differ up to 3x, almost no freed block
//     fitted the next batch, and fresh pages' faults took 28% of a MiniLM bf16 evaluation on a
//     Xeon (Fine Foods' test set 6.9 -> 4.0 s with eight; four classes gained nothing, sixteen
//     nothing more and grew the peak RSS 11%; bench/RESULTS.md);
//   - the cache is bounded by the run's own peak: live blocks plus cached blocks never exceed 1.25x
//     the largest footprint of live blocks so far (cached blocks are released, largest first, to
//     stay under it), so the blocks this allocator holds stay within a quarter of the peak of what
//     the program had live (and under MIXTRAIN_ALLOCATOR_CACHE_MB's cap, default 2048, 0: no cache).
#include "mixtrain/tensor/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixtrain/core/error.h"
#include "mixtrain/core/profiler.h"

namespace mixtrain {
namespace {

size_t default_cache_cap() {
#ifdef __SANITIZE_ADDRESS__
  return 0;
#else
  if (const char* e = std::getenv("MIXTRAIN_ALLOCATOR_CACHE_MB")) return std::strtoull(e, nullptr, 10) << 20;
  return size_t{2} << 30;  // 2 GiB
#endif
}

constexpr size_t kLargeBlock = size_t{1} << 20;  // from here on: size classes and mmap
constexpr size_t kPage = 4096;

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }

  void* allocate(size_t bytes, MemCategory category) override {
    // Round up to the alignment (aligned_alloc requires a multiple); zero-byte tensors still get a
    // unique valid pointer so data() is never null.
    if (bytes > std::numeric_limits<size_t>::max() / 2)
      throw ShapeError("allocate: " + std::to_string(bytes) + " bytes is too large");
    const size_t want = block_size(bytes);
    void* p = nullptr;
    size_t got = want;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(want);
      // the class itself, or (large blocks) the smallest cached block up to twice its size
      const size_t limit = want >= kLargeBlock ? fit_limit(want) : want;
      if (it != free_.end() && it->first <= limit) {
        got = it->first;
        p = it->second;
        free_.erase(it);
        stats_.cached_bytes -= int64_t(got);
        ++stats_.cache_hits;
      }
    }
    if (!p) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        trim_to(live_ + want);  // make room under the bound before growing
      }
      ProfileScope prof(WorkKind::allocator);
      p = system_alloc(want);
      if (!p) {
        release_cached();  // give the cache back and try once more before failing
        p = system_alloc(want);
      }
      if (!p) throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.system_allocations;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (got != want) served_larger_[p] = got;
      live_ += got;
      peak_live_ = std::max(peak_live_, live_);
    }
    MemoryTracker::global().on_allocate(category, bytes);
    return p;
  }

  void deallocate(void* ptr, size_t bytes, MemCategory category) override {
    if (!ptr) return;
    MemoryTracker::global().on_free(category, bytes);
    size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = served_larger_.find(ptr); it != served_larger_.end()) {
        size = it->second;
        served_larger_.erase(it);
      }
      live_ -= size;
      if (size_t(stats_.cached_bytes) + size <= cap_ &&
          live_ + size_t(stats_.cached_bytes) + size <= bound()) {
        free_.emplace(size, ptr);
        stats_.cached_bytes += int64_t(size);
        return;
      }
    }
    ProfileScope prof(WorkKind::allocator);
    system_free(ptr, size);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, p] : free_) system_free(p, size);
    free_.clear();
    stats_.cached_bytes = 0;
    peak_live_ = live_;  // a new run's bound starts from what is live now
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  // Small: the next multiple of 64 bytes. Large: the next of 8 classes per doubling, in pages.
  static size_t block_size(size_t bytes) {
    const size_t r = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    if (r == 0) return kTensorAlignment;
    if (r < kLargeBlock) return r;
    const size_t step = std::bit_floor(r) / 8;  // >= 128 KiB, a multiple of the page
    return (r + step - 1) / step * step;
  }
  static size_t next_class(size_t size) { return block_size(size + 1); }
  // The largest cached block a large request may take: eight classes up, twice its size.
  static size_t fit_limit(size_t want) {
    size_t limit = want;
    for (int i = 0; i < 8; ++i) limit = next_class(limit);
    return limit;
  }

  static void* system_alloc(size_t size) {
    if (size < kLargeBlock) return std::aligned_alloc(kTensorAlignment, size);
    void* p = mmap(nullptr, size + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    static std::atomic<unsigned> color{0};
    return static_cast<char*>(p) + (color.fetch_add(1, std::memory_order_relaxed) % 16) * 256;
  }
  static void system_free(void* p, size_t size) {
    if (size < kLargeBlock)
      std::free(p);
    else
      munmap(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(kPage - 1)),
             (size + kPage - 1) / kPage * kPage + kPage);
  }

  // What live plus cached blocks may hold: the peak of live blocks so far and a quarter more. The
  // quarter lets a step whose sizes repeat keep a block of every size it frees and allocates again
  // (a cached block of one size cannot serve another, so live + cached exceeds the live peak at
  // times); without it, one missing block chased another out of the cache at every step (22 system
  // allocations a gpt-mini step, 10% slower).
  size_t bound() const { return peak_live_ + peak_live_ / 4; }

  // Releases cached blocks, largest first, until `footprint` (live bytes to be) plus the cache fits
  // under bound(). Called with mu_ held.
  void trim_to(size_t footprint) {
    const size_t limit = std::max(bound(), footprint);
    while (!free_.empty() && footprint + size_t(stats_.cached_bytes) > limit) {
      auto last = std::prev(free_.end());
      stats_.cached_bytes -= int64_t(last->first);
      system_free(last->second, last->first);
      free_.erase(last);
      ++stats_.released_blocks;
    }
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;                // block size -> free block
  std::unordered_map<void*, size_t> served_larger_;  // live blocks of a larger class than asked
  size_t live_ = 0, peak_live_ = 0;                  // bytes of live blocks (as allocated), and their peak
  size_t cap_ = default_cache_cap();
  AllocatorStats stats_;
};

CpuAllocator& cpu() {
  static CpuAllocator a;
  return a;
}

}  // namespace

Allocator& cpu_allocator() { return cpu(); }
AllocatorStats cpu_allocator_stats() { return cpu().stats(); }
void cpu_allocator_release_cached() { cpu().release_cached(); }

}  // namespace mixtrain
