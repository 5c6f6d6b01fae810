// The element-wise sums of the data-parallel reductions, apart from any transport so they are
// tested without MPI: inout[i] = in[i] + inout[i], 16-bit formats widened to fp32, added, and
// rounded back to nearest even (OpenMPI has no bf16 or fp16 datatype: the MPI world runs these
// as user-defined operations over 16-bit words).
#pragma once
#include <cstdint>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain::dist {

// dtype: f32, bf16 or f16 (ArgumentError otherwise). in, inout: (n) elements of dtype.
void sum_into(const void* in, void* inout, int64_t n, DType dtype);

}  // namespace mixtrain::dist
