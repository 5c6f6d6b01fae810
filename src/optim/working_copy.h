// The 16-bit working copy of the fp32 master weights (the *-mixed modes): a flat bf16 or f16
// buffer in the ParameterStore's layout. The optimizers write it in the same pass over memory as
// the fp32 update (each piece is rounded while it is still in cache), so the next forward pass
// reads it (optim/mixed_precision.h registers it with autocast) instead of casting every weight
// again.
#pragma once
#include <cstdint>

#include "mixtrain/kernels/optimizer_kernels.h"  // WorkingCopyOut, write_working_copy
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// The descriptor for `working` (may be null: none). Throws DTypeError unless it is bf16 or f16,
// ShapeError unless it is contiguous with flat_numel elements; `op` names the caller.
WorkingCopyOut working_copy_out(Tensor* working, int64_t flat_numel, const char* op);

}  // namespace mixtrain
