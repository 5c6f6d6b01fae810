// The backends of this build (kernels/backend.h) and the op registry (kernels/op.h).
#include <string>

#include "kernels/backend.h"
#include "kernels/op.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {
constexpr Backend kCpu{BackendId::cpu, "cpu"};
constexpr Backend kMeta{BackendId::meta, "meta"};

std::vector<OpInfo>& op_list() {
  static std::vector<OpInfo> ops;
  return ops;
}
}  // namespace

const Backend& backend_for(Device device) {
  if (device.type == DeviceType::cpu) return kCpu;
  if (device.type == DeviceType::meta) return kMeta;
  throw ArgumentError("no backend for device " + device.to_string() + " in this build");
}

const std::vector<OpInfo>& registered_ops() { return op_list(); }

namespace detail {
void register_op(OpInfo info) { op_list().push_back(std::move(info)); }

void throw_no_impl(const char* op, const Backend& backend) {
  throw ArgumentError(std::string(op) + ": no implementation on the " + backend.name + " backend");
}
}  // namespace detail

}  // namespace mixtrain
