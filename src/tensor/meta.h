// The meta device's allocator, seen from inside: what the memory predictor
// (train/memory_prediction.h) listens to. A meta allocation hands out an address that is unique
// among all meta allocations of the process and is never backed by memory: it lies outside the
// canonical x86-64 address range, so any read or write through it faults at once instead of
// touching something else. The bytes are charged to MemoryTracker::meta().
#pragma once
#include <cstddef>
#include <cstdint>

#include "mixtrain/tensor/dtype.h"
#include "mixtrain/tensor/memory.h"
#include "mixtrain/tensor/shape.h"

namespace mixtrain {

// The tensor a meta allocation is for (Tensor::empty notes it just before allocating).
struct MetaTensorDesc {
  Shape shape;
  DType dtype = DType::f32;
};

class MetaObserver {
 public:
  virtual ~MetaObserver() = default;
  // desc: the tensor being created, or null for storage not made by Tensor::empty.
  virtual void on_allocate(uintptr_t address, size_t bytes, MemCategory category,
                           const MetaTensorDesc* desc) = 0;
  virtual void on_free(uintptr_t address, size_t bytes, MemCategory category) = 0;
};

// Installs the observer of every meta allocation and free (null: none). One at a time per
// process; the scope restores the previous one.
class ScopedMetaObserver {
 public:
  explicit ScopedMetaObserver(MetaObserver* o);
  ~ScopedMetaObserver();
  ScopedMetaObserver(const ScopedMetaObserver&) = delete;
  ScopedMetaObserver& operator=(const ScopedMetaObserver&) = delete;

 private:
  MetaObserver* saved_;
};

// Called by Tensor::empty before it allocates on meta: the next meta allocation on this thread is
// for this tensor.
void meta_note_tensor(const Shape& shape, DType dtype);

}  // namespace mixtrain
