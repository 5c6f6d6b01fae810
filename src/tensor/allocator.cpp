// The CPU allocator: 64-byte aligned blocks from the system, charged to the memory tracker.
// (A caching allocator for steady-state training steps comes with the performance work.)
#include "mixtrain/tensor/allocator.h"

#include <cstdlib>
#include <limits>
#include <new>
#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }

  void* allocate(size_t bytes, MemCategory category) override {
    // Round up to the alignment (aligned_alloc requires a multiple); zero-byte tensors still get a
    // unique valid pointer so data() is never null.
    if (bytes > std::numeric_limits<size_t>::max() - kTensorAlignment)
      throw ShapeError("allocate: " + std::to_string(bytes) + " bytes is too large");
    const size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    void* p = std::aligned_alloc(kTensorAlignment, rounded == 0 ? kTensorAlignment : rounded);
    if (!p) throw std::bad_alloc();
    MemoryTracker::global().on_allocate(category, bytes);
    return p;
  }

  void deallocate(void* ptr, size_t bytes, MemCategory category) override {
    if (!ptr) return;
    std::free(ptr);
    MemoryTracker::global().on_free(category, bytes);
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

}  // namespace mixtrain
