// Storage: owns one allocation and its memory-accounting charge.
#include "mixtrain/tensor/storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <string>

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
    s->reserved_ = true;
    return s;
  }
  // Written by hand on mmap: no library reserves address space. MAP_NORESERVE: the untouched
  // pages are not counted against the commit limit either.
  void* p = ::mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  MemoryTracker::global().on_allocate(category, charged);
  std::shared_ptr<Storage> s(new Storage(p, bytes, charged, category, allocator));
  s->reserved_ = true;
  return s;
}

void Storage::check_range(size_t offset, size_t bytes, const char* op) const {
  if (!reserved_)
    throw ArgumentError(std::string("Storage::") + op + ": not a reserved block (Tensor::reserved)");
  if (offset > bytes_ || bytes > bytes_ - offset)
    throw ArgumentError(std::string("Storage::") + op + ": bytes [" + std::to_string(offset) + ", " +
                        std::to_string(offset + bytes) + ") outside the block of " + std::to_string(bytes_));
}

void Storage::commit(size_t offset, size_t bytes) {
  check_range(offset, bytes, "commit");
  if (bytes == 0) return;
  if (!mapped_) {  // meta: an allocation the prediction sees
    meta_commits_.push_back({offset, {allocator_->allocate(bytes, category_), bytes}});
    return;
  }
  MemoryTracker::global().on_allocate(category_, bytes);
  charged_ += bytes;
}

void Storage::decommit(size_t offset, size_t bytes) {
  check_range(offset, bytes, "decommit");
  if (bytes == 0) return;
  if (!mapped_) {
    for (size_t i = 0; i < meta_commits_.size(); ++i)
      if (meta_commits_[i].first == offset && meta_commits_[i].second.second == bytes) {
        allocator_->deallocate(meta_commits_[i].second.first, bytes, category_);
        meta_commits_.erase(meta_commits_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    throw ArgumentError("Storage::decommit: bytes [" + std::to_string(offset) + ", " +
                        std::to_string(offset + bytes) + ") were not committed");
  }
  if (bytes > charged_) throw ArgumentError("Storage::decommit: more bytes than the block is charged");
  discard(offset, bytes);
  MemoryTracker::global().on_free(category_, bytes);
  charged_ -= bytes;
}

void Storage::discard(size_t offset, size_t bytes) {
  check_range(offset, bytes, "discard");
  if (!mapped_) return;
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t first = (offset + page - 1) / page * page, last = (offset + bytes) / page * page;
  if (last > first)  // MADV_DONTNEED on a private anonymous mapping: the pages read as zeros again
    ::madvise(static_cast<char*>(data_) + first, last - first, MADV_DONTNEED);
}

Storage::~Storage() {
  for (auto& [offset, c] : meta_commits_) allocator_->deallocate(c.first, c.second, category_);
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
