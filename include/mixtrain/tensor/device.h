// Where a tensor's storage lives. The CPU holds real data; `meta` holds none: a meta tensor has a
// shape, a dtype and a memory category, charges its device's memory tracker like a real one, and
// every op on it allocates what the CPU op would allocate but computes nothing (PyTorch's meta
// tensors, ggml's measure graph). Running a training step on meta is how mixtrain predicts its
// memory (train/memory_prediction.h). CUDA is named so that callers and tensors already carry a
// device and a CUDA backend can be added behind the same interface.
#pragma once
#include <cstdint>
#include <string>

namespace mixtrain {

enum class DeviceType : uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static constexpr Device cpu() { return Device{DeviceType::cpu, 0}; }
  static constexpr Device meta() { return Device{DeviceType::meta, 0}; }
  bool is_meta() const { return type == DeviceType::meta; }
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  std::string to_string() const {
    switch (type) {
      case DeviceType::cpu:
        return "cpu";
      case DeviceType::meta:
        return "meta";
      case DeviceType::cuda:
        break;
    }
    return "cuda:" + std::to_string(index);
  }
};

// The device new tensors are created on when the caller names none: the CPU, or what the
// innermost DeviceScope of this thread says.
Device default_device();

// Makes `d` the default device of this thread until the scope ends (scopes nest).
class DeviceScope {
 public:
  explicit DeviceScope(Device d);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device saved_;
};

}  // namespace mixtrain
