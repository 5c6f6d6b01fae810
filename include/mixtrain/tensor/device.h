// Where a tensor's storage lives. Only the CPU exists today; CUDA is named so that callers and
// tensors already carry a device and a CUDA backend can be added behind the same interface.
#pragma once
#include <cstdint>
#include <string>

namespace mixtrain {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static constexpr Device cpu() { return Device{DeviceType::cpu, 0}; }
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  std::string to_string() const { return type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace mixtrain
