// A block of memory owned by one or more tensors (views share it). Freed, and uncharged from the
// memory tracker, when the last tensor using it goes away.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/device.h"

namespace mixtrain {

class Storage {
 public:
  Storage(size_t bytes, MemCategory category, Allocator& allocator);
  // A reserved block (Tensor::reserved): `bytes` of zeroed address space of which only the
  // `charged` bytes a caller writes are memory. On the CPU an anonymous mapping that commits a page
  // at its first write (reads of untouched pages see zeros and cost nothing), charged `charged`
  // bytes; on the meta device an allocation of `charged` bytes.
  static std::shared_ptr<Storage> reserved(size_t bytes, size_t charged, MemCategory category, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  size_t charged_bytes() const { return charged_; }  // bytes() but for a reserved block
  MemCategory category() const { return category_; }
  Device device() const { return allocator_->device(); }
  // Moves the bytes to another accounting category (e.g. a workspace buffer kept as activation).
  void recharge(MemCategory category);
  // A counter bumped by every in-place update that others may have cached a copy of (the
  // optimizer step bumps its parameters): autocast's weight-cast cache compares it, so a cached
  // low-precision copy can never be stale.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  Storage(void* mapped, size_t bytes, size_t charged, MemCategory category, Allocator& allocator);
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t charged_ = 0;
  bool mapped_ = false;  // a reserved CPU block: munmap, not the allocator
  MemCategory category_;
  Allocator* allocator_;
  uint64_t version_ = 0;
};

}  // namespace mixtrain
