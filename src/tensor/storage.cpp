// Storage: owns one allocation and its memory-accounting charge.
#include "mixtrain/tensor/storage.h"

namespace mixtrain {

Storage::Storage(size_t bytes, MemCategory category, Allocator& allocator)
    : bytes_(bytes), category_(category), allocator_(&allocator) {
  data_ = allocator_->allocate(bytes, category);
}

Storage::~Storage() { allocator_->deallocate(data_, bytes_, category_); }

void Storage::recharge(MemCategory category) {
  if (category == category_) return;
  MemoryTracker::global().on_free(category_, bytes_);
  MemoryTracker::global().on_allocate(category, bytes_);
  category_ = category;
}

}  // namespace mixtrain
