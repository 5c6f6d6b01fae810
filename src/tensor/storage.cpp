// Storage: owns one allocation and its memory-accounting charge.
#include "mixtrain/tensor/storage.h"

#include <sys/mman.h>

#include <new>

#include "mixtrain/core/error.h"

namespace mixtrain {

Storage::Storage(size_t bytes, MemCategory category, Allocator& allocator)
    : bytes_(bytes), charged_(bytes), category_(category), allocator_(&allocator) {
  data_ = allocator_->allocate(bytes, category);
}

Storage::Storage(void* mapped, size_t bytes, size_t charged, MemCategory category, Allocator& allocator)
    : data_(mapped),
      bytes_(bytes),
      charged_(charged),
      mapped_(true),
      category_(category),
      allocator_(&allocator) {}

std::shared_ptr<Storage> Storage::reserved(size_t bytes, size_t charged, MemCategory category,
                                           Device device) {
  if (charged > bytes)
    throw ArgumentError("Storage::reserved: " + std::to_string(charged) + " charged bytes of a block of " +
                        std::to_string(bytes));
  Allocator& allocator = allocator_for(device);
  if (device.is_meta()) {  // what a prediction must see: an allocation of the charged bytes
    auto s = std::make_shared<Storage>(charged, category, allocator);
    s->bytes_ = bytes;
    return s;
  }
  // Written by hand on mmap: no library reserves address space. MAP_NORESERVE: the untouched
  // pages are not counted against the commit limit either.
  void* p = ::mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  MemoryTracker::global().on_allocate(category, charged);
  return std::shared_ptr<Storage>(new Storage(p, bytes, charged, category, allocator));
}

Storage::~Storage() {
  if (mapped_) {
    ::munmap(data_, bytes_ == 0 ? 1 : bytes_);
    MemoryTracker::global().on_free(category_, charged_);
    return;
  }
  allocator_->deallocate(data_, charged_, category_);
}

void Storage::recharge(MemCategory category) {
  if (category == category_) return;
  if (device().is_meta())  // the meta observer sees allocations and frees only
    throw ArgumentError("Storage::recharge: not supported on the meta device");
  MemoryTracker& t = device().is_meta() ? MemoryTracker::meta() : MemoryTracker::global();
  t.on_free(category_, charged_);
  t.on_allocate(category, charged_);
  category_ = category;
}

}  // namespace mixtrain
