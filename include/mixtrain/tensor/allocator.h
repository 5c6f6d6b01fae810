// Allocators hand out raw storage and charge it to the memory tracker. The CPU allocator returns
// 64-byte aligned blocks (one cache line, one AVX-512 vector).
#pragma once
#include <cstddef>
#include <cstdint>

#include "mixtrain/tensor/device.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {

constexpr size_t kTensorAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // Never returns null: throws ShapeError on an impossible size, std::bad_alloc when out of memory.
  virtual void* allocate(size_t bytes, MemCategory category) = 0;
  virtual void deallocate(void* ptr, size_t bytes, MemCategory category) = 0;
};

Allocator& cpu_allocator();
// The allocator of a device: the CPU's, or meta's (tensor/meta.h: addresses that are never
// backed by memory). Throws ArgumentError for a device this build cannot allocate on.
Allocator& allocator_for(Device device);

struct AllocatorStats {
  int64_t system_allocations = 0;  // blocks obtained from the system (not from the cache)
  int64_t cache_hits = 0;    // allocations served from freed blocks (of the size class, or up to 2x its size)
  int64_t cached_bytes = 0;  // freed bytes kept for reuse (not counted as live by the tracker)
  int64_t released_blocks = 0;  // cached blocks given back to keep live + cached under the peak
};
// The CPU allocator keeps freed blocks for reuse (src/tensor/allocator.cpp: size classes from
// 1 MiB, best fit up to 2x the request), bounded by the peak of its live blocks so far and by
// MIXTRAIN_ALLOCATOR_CACHE_MB (default 2048; 0 disables; always off under AddressSanitizer).
AllocatorStats cpu_allocator_stats();
// Returns every cached block to the system, and starts the cache's bound anew from the live blocks.
void cpu_allocator_release_cached();

}  // namespace mixtrain
