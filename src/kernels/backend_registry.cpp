// Backend lookup by device (kernels/backend.h): the backends of this build, CPU and meta. Apart
// from backend.cpp so that the backends include the interface and nothing includes them back.
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/meta/meta_backend.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

CpuBackend& CpuBackend::instance() {
  static CpuBackend backend;
  return backend;
}

Backend& backend_for(Device device) {
  if (device.type == DeviceType::cpu) return CpuBackend::instance();
  if (device.type == DeviceType::meta) return MetaBackend::instance();
  throw ArgumentError("no backend for device " + device.to_string() + " in this build");
}

}  // namespace mixtrain
