// The meta allocator (tensor/meta.h): unique, never-backed addresses; bytes charged to the meta
// tracker; every allocation and free reported to the installed observer.
#include <atomic>
#include <limits>
#include <optional>
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/tensor/allocator.h"
#include "tensor/meta.h"

namespace mixtrain {
namespace {

// Bit 62 set, bit 63 clear: not a canonical x86-64 (or AArch64 user) address, so it can never be
// a real one, and a dereference faults. 2^62 bytes of fresh addresses before any could repeat.
constexpr uintptr_t kMetaBase = uintptr_t{1} << 62;

std::atomic<MetaObserver*> g_observer{nullptr};

thread_local std::optional<MetaTensorDesc> t_pending;

class MetaAllocator final : public Allocator {
 public:
  Device device() const override { return Device::meta(); }

  void* allocate(size_t bytes, MemCategory category) override {
    if (bytes > std::numeric_limits<size_t>::max() / 2)
      throw ShapeError("allocate: " + std::to_string(bytes) + " bytes is too large");
    const size_t rounded =
        bytes == 0 ? kTensorAlignment : (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    const uintptr_t address = kMetaBase + next_.fetch_add(rounded, std::memory_order_relaxed);
    MemoryTracker::meta().on_allocate(category, bytes);
    std::optional<MetaTensorDesc> desc;
    desc.swap(t_pending);
    if (MetaObserver* o = g_observer.load(std::memory_order_acquire))
      o->on_allocate(address, bytes, category, desc ? &*desc : nullptr);
    return reinterpret_cast<void*>(address);
  }

  void deallocate(void* ptr, size_t bytes, MemCategory category) override {
    MemoryTracker::meta().on_free(category, bytes);
    if (MetaObserver* o = g_observer.load(std::memory_order_acquire))
      o->on_free(reinterpret_cast<uintptr_t>(ptr), bytes, category);
  }

 private:
  std::atomic<uintptr_t> next_{0};
};

MetaAllocator& meta() {
  static MetaAllocator a;
  return a;
}

}  // namespace

ScopedMetaObserver::ScopedMetaObserver(MetaObserver* o) : saved_(g_observer.exchange(o)) {}
ScopedMetaObserver::~ScopedMetaObserver() { g_observer.store(saved_); }

void meta_note_tensor(const Shape& shape, DType dtype) { t_pending = MetaTensorDesc{shape, dtype}; }

Allocator& allocator_for(Device device) {
  switch (device.type) {
    case DeviceType::cpu:
      return cpu_allocator();
    case DeviceType::meta:
      return meta();
    case DeviceType::cuda:
      break;
  }
  throw ArgumentError("no allocator for device " + device.to_string() + " in this build");
}

}  // namespace mixtrain
