// The backends of this build: the CPU (fast kernels, scalar references) and the meta device
// (tensor/device.h: shapes only; each op allocates the temporaries the CPU's would). A backend is
// op agnostic, as ggml's is: it names a column of the op table (kernels/op.h), and adding an op
// adds no method here. A CUDA backend would be a third column.
#pragma once
#include "mixtrain/tensor/device.h"

namespace mixtrain {

enum class BackendId : int { cpu = 0, meta = 1 };
inline constexpr int kNumBackends = 2;

struct Backend {
  BackendId id;
  const char* name;  // "cpu", "meta"
};

// The backend for a device; throws ArgumentError for a device this build has no backend for.
const Backend& backend_for(Device device);

}  // namespace mixtrain
