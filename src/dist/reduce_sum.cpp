// The data-parallel element-wise sums (dist/reduce_sum.h).
#include "dist/reduce_sum.h"

#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain::dist {

void sum_into(const void* in, void* inout, int64_t n, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      const float* a = static_cast<const float*>(in);
      float* b = static_cast<float*>(inout);
      for (int64_t i = 0; i < n; ++i) b[i] = a[i] + b[i];
      return;
    }
    case DType::bf16: {
      const bf16* a = static_cast<const bf16*>(in);
      bf16* b = static_cast<bf16*>(inout);
      for (int64_t i = 0; i < n; ++i) b[i] = bf16_from_f32(f32_from_bf16(a[i]) + f32_from_bf16(b[i]));
      return;
    }
    case DType::f16: {
      const fp16* a = static_cast<const fp16*>(in);
      fp16* b = static_cast<fp16*>(inout);
      for (int64_t i = 0; i < n; ++i) b[i] = fp16_from_f32(f32_from_fp16(a[i]) + f32_from_fp16(b[i]));
      return;
    }
    default:
      throw ArgumentError("dist::sum_into: cannot reduce " + std::string(dtype_name(dtype)) +
                          " (f32, bf16 or f16 only)");
  }
}

}  // namespace mixtrain::dist
