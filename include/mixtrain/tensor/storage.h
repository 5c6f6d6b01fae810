// A block of memory owned by one or more tensors (views share it). Freed, and uncharged from the
// memory tracker, when the last tensor using it goes away.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

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
  // A reserved block's bytes [offset, offset + bytes) made memory for a while (ZeRO-3's gathered
  // parameters, train/param_shards.h): commit charges them (on the meta device: an allocation of
  // that size, which a prediction sees); decommit uncharges them and gives back to the system
  // the pages wholly inside the range (their contents then read as zeros; a page shared with a
  // neighbouring range stays). discard gives back those pages without any charge (bytes written
  // before the range was ever committed). The caller keeps the ranges apart and decommits each
  // committed range exactly once; ArgumentError on a block that is not reserved or a range
  // outside it.
  void commit(size_t offset, size_t bytes);
  void decommit(size_t offset, size_t bytes);
  void discard(size_t offset, size_t bytes);
  // Moves the bytes to another accounting category (e.g. a workspace buffer kept as activation).
  void recharge(MemCategory category);
  // A counter bumped by every in-place update that others may have cached a copy of (the
  // optimizer step bumps its parameters): autocast's weight-cast cache compares it, so a cached
  // low-precision copy can never be stale.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  // What a backend derives from this storage's bytes and keeps while the storage lives (the CPU
  // GEMM's weights in its blocked layout, kernels/cpu/gemm_onednn.cpp), released with it; the
  // backend compares version() to know when to derive it again.
  std::shared_ptr<void>& derived() { return derived_; }

 private:
  Storage(void* mapped, size_t bytes, size_t charged, MemCategory category, Allocator& allocator);
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t charged_ = 0;
  bool mapped_ = false;    // a reserved CPU block: munmap, not the allocator
  bool reserved_ = false;  // made by reserved() (CPU or meta)
  // The meta device's committed ranges: offset -> (meta address, bytes), freed by decommit or at
  // the end.
  std::vector<std::pair<size_t, std::pair<void*, size_t>>> meta_commits_;
  void check_range(size_t offset, size_t bytes, const char* op) const;
  MemCategory category_;
  Allocator* allocator_;
  uint64_t version_ = 0;
  std::shared_ptr<void> derived_;  // released with the storage
};

}  // namespace mixtrain
