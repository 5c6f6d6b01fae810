// The int8 row of quantize_rows in AVX-512 (quantize_avx512.cpp; the portable loops are in
// quantize_cpu.cpp, kernels/cpu/simd_forms.h says which runs).
#pragma once
#include <cstdint>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain::cpu {

// One row of C elements of x (bf16 or f32, xt) -> C int8 codes in q; returns the row's scale
// (kernels/quant_formula.h: amax / 127, 1 for a row below 2^-120, NaN with codes 0 for a row
// holding inf or NaN).
float quantize_row_i8_avx512(const void* x, DType xt, int64_t C, int8_t* q);

}  // namespace mixtrain::cpu
