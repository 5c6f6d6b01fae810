// Allocators hand out raw storage and charge it to the memory tracker. The CPU allocator returns
// 64-byte aligned blocks (one cache line, one AVX-512 vector).
#pragma once
#include <cstddef>

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

}  // namespace mixtrain
