// GELU (tanh and erf forms) forward and backward rows in AVX-512 (gelu_avx512.cpp), reading and writing
// bf16 or f32 elements in place: the portable form (elementwise_cpu.cpp, backward_cpu.cpp) stages
// 16-bit rows through fp32 buffers and divides; kernels/cpu/simd_forms.h says which form runs.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "kernels/cpu/simd_forms.h"
#include "mixtrain/tensor/dtype.h"

namespace mixtrain::cpu {

// Whether the rows run for operands of these dtypes: the AVX-512 forms run (simd_forms.h) and each
// is bf16 or f32.
inline bool gelu_avx512_takes(std::initializer_list<DType> ts) {
  for (DType t : ts)
    if (t != DType::bf16 && t != DType::f32) return false;
  return avx512_forms_run();
}

// o[i] = gelu(x[i]) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), for n elements.
void gelu_row_avx512(const void* x, DType xt, void* o, DType ot, int64_t n);
// o[i] = g[i] * gelu'(x[i]) (backward_cpu.cpp's formula), for n elements. o may be x or g.
void gelu_backward_row_avx512(const void* x, DType xt, const void* g, DType gt, void* o, DType ot, int64_t n);
// The erf form (ops.h Activation::gelu_erf): o[i] = 0.5 x (1 + erf(x / sqrt(2))), and its backward
// o[i] = g[i] (cdf(x) + x pdf(x)) (encoder_cpu.cpp's formulas).
void gelu_erf_row_avx512(const void* x, DType xt, void* o, DType ot, int64_t n);
void gelu_erf_backward_row_avx512(const void* x, DType xt, const void* g, DType gt, void* o, DType ot,
                                  int64_t n);

}  // namespace mixtrain::cpu
