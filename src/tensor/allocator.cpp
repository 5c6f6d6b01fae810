// The CPU allocator: 64-byte aligned blocks, charged to the memory tracker, with a cache of freed
// blocks by exact size. A training step frees and re-allocates the same activation sizes every
// step; serving them from the cache avoids asking the system again (which, for large blocks,
// means fresh pages that the kernel must zero on first touch: 11% of an fp32 step, see
// bench/RESULTS.md). The memory tracker counts live tensor bytes only; cached bytes are reported
// separately (cpu_allocator_stats). Under AddressSanitizer the cache is off, so a use after free
// is still caught.
#include "mixtrain/tensor/allocator.h"

#include <cstdlib>
#include <limits>
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

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }

  void* allocate(size_t bytes, MemCategory category) override {
    // Round up to the alignment (aligned_alloc requires a multiple); zero-byte tensors still get a
    // unique valid pointer so data() is never null.
    if (bytes > std::numeric_limits<size_t>::max() - kTensorAlignment)
      throw ShapeError("allocate: " + std::to_string(bytes) + " bytes is too large");
    const size_t rounded = block_size(bytes);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= static_cast<int64_t>(rounded);
        ++stats_.cache_hits;
      }
    }
    if (!p) {
      ProfileScope prof(WorkKind::allocator);
      p = std::aligned_alloc(kTensorAlignment, rounded);
      if (!p) {
        release_cached();  // give the cache back and try once more before failing
        p = std::aligned_alloc(kTensorAlignment, rounded);
      }
      if (!p) throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.system_allocations;
    }
    MemoryTracker::global().on_allocate(category, bytes);
    return p;
  }

  void deallocate(void* ptr, size_t bytes, MemCategory category) override {
    if (!ptr) return;
    MemoryTracker::global().on_free(category, bytes);
    const size_t rounded = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<size_t>(stats_.cached_bytes) + rounded <= cap_) {
        free_[rounded].push_back(ptr);
        stats_.cached_bytes += static_cast<int64_t>(rounded);
        return;
      }
    }
    ProfileScope prof(WorkKind::allocator);
    std::free(ptr);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    stats_.cached_bytes = 0;
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  static size_t block_size(size_t bytes) {
    const size_t r = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    return r == 0 ? kTensorAlignment : r;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // block size -> free blocks
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
