// Storage: owns one allocation and its memory-accounting charge.
#include "mixtrain/tensor/storage.h"

#include "mixtrain/core/error.h"

namespace mixtrain {

Storage::Storage(size_t bytes, MemCategory category, Allocator& allocator)
    : bytes_(bytes), category_(category), allocator_(&allocator) {
  data_ = allocator_->allocate(bytes, category);
}

Storage::~Storage() { allocator_->deallocate(data_, bytes_, category_); }

void Storage::recharge(MemCategory category) {
  if (category == category_) return;
  if (device().is_meta())  // the meta observer sees allocations and frees only
    throw ArgumentError("Storage::recharge: not supported on the meta device");
  MemoryTracker& t = device().is_meta() ? MemoryTracker::meta() : MemoryTracker::global();
  t.on_free(category_, bytes_);
  t.on_allocate(category, bytes_);
  category_ = category;
}

}  // namespace mixtrain
