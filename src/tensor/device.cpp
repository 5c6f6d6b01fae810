// The per-thread default device (tensor/device.h).
#include "mixtrain/tensor/device.h"

namespace mixtrain {
namespace {
thread_local Device t_default = Device::cpu();
}  // namespace

Device default_device() { return t_default; }

DeviceScope::DeviceScope(Device d) : saved_(t_default) { t_default = d; }
DeviceScope::~DeviceScope() { t_default = saved_; }

}  // namespace mixtrain
