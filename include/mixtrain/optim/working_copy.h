// The 16-bit working copy of the fp32 master weights (the *-mixed modes): a flat bf16 or f16
// buffer in the ParameterStore's layout. The optimizers write it in the same pass over memory as
// the fp32 update (each piece is rounded while it is still in cache), so the next forward pass
// reads it (amp/mixed_precision.h registers it with autocast) instead of casting every weight
// again.
#pragma once
#include <cstdint>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct WorkingCopyOut {
  void* data = nullptr;  // null: no working copy is written
  DType dtype = DType::bf16;
  explicit operator bool() const { return data != nullptr; }
};

// The descriptor for `working` (may be null: none). Throws DTypeError unless it is bf16 or f16,
// ShapeError unless it is contiguous with flat_numel elements; `op` names the caller.
WorkingCopyOut working_copy_out(Tensor* working, int64_t flat_numel, const char* op);

// w[offset + i] = round_to_nearest_even(p[offset + i]) for i < n (no-op when w is empty).
void write_working_copy(const float* p, const WorkingCopyOut& w, int64_t offset, int64_t n);

}  // namespace mixtrain
