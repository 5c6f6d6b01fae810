// The 16-bit working copy of the fp32 master weights (the *-mixed modes): a flat bf16 or f16
// buffer in the ParameterStore's layout, of the arena's end: from the first parameter autocast
// casts (optim/mixed_precision.h) to the last element, so leading embedding tables, which autocast
// runs in fp32, get no copy. The optimizers write it in the same pass over memory as the fp32
// update (each piece is rounded while it is still in cache), so the next forward pass reads it
// (optim/mixed_precision.h registers it with autocast) instead of casting every weight again.
#pragma once
#include <cstdint>

#include "mixtrain/kernels/optimizer_kernels.h"  // WorkingCopyOut, write_working_copy
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// The descriptor for `working` (may be null: none): a copy of the last working->numel() of the
// arena's flat_numel elements. Throws DTypeError unless it is bf16 or f16, ShapeError unless it
// is flat, contiguous and at most flat_numel long; `op` names the caller.
WorkingCopyOut working_copy_out(Tensor* working, int64_t flat_numel, const char* op);

}  // namespace mixtrain
