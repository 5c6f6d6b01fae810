// Scalar reference of the fp8 recipes' quantization (kernels/fp8.h): one block at a time, one
// element at a time, any strides; the scale rules of kernels/fp8_formula.h and numeric/fp8.h's
// casts.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/fp8_formula.h"
#include "mixtrain/kernels/fp8.h"

namespace mixtrain::ref {

void fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q, Tensor& scale_inv,
                  Tensor& amax) {
  const int64_t R = x.size(0), C = x.size(1);
  const Fp8Blocks bl = fp8_blocks(how, R, C);
  const int64_t br = bl.rows, bc = bl.cols, nbc = bl.grid_cols;
  const auto xv = [&](int64_t r, int64_t c) {
    return load_as_f32(x.raw_data(), x.dtype(), r * x.stride(0) + c * x.stride(1));
  };
  for (int64_t i = 0; i * br < R; ++i)
    for (int64_t j = 0; j * bc < C; ++j) {
      const int64_t r0 = i * br, r1 = std::min(R, r0 + br), c0 = j * bc, c1 = std::min(C, c0 + bc);
      float m = 0.f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float a = std::fabs(xv(r, c));
          m = std::isfinite(a) ? std::max(m, a) : INFINITY;
        }
      const int64_t s_off = i * nbc + j;
      static_cast<float*>(amax.raw_data())[s_off] = m;
      const fp8q::Scale s =
          fp8q::block_scale(m, how, scale ? static_cast<const float*>(scale->raw_data()) + s_off : nullptr);
      static_cast<float*>(scale_inv.raw_data())[s_off] = s.scale_inv;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          float v = std::isfinite(m) ? fp8q::cast_value(xv(r, c) * s.scale, how.format) : NAN;
          if (how.dequantize) v *= s.scale_inv;
          store_from_f32(q.raw_data(), q.dtype(), r * q.stride(0) + c * q.stride(1), v);
        }
    }
}

void fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                     Fp8ErrorStats& s) {
  const int64_t R = x.size(0), C = x.size(1);
  const Fp8Blocks bl = fp8_blocks(how, R, C);
  const int64_t br = bl.rows, bc = bl.cols, nbc = bl.grid_cols;
  const float* si = static_cast<const float*>(scale_inv.raw_data());
  for (int64_t r = 0; r < R; ++r) {
    Fp8ErrorStats row;
    for (int64_t c = 0; c < C; ++c)
      fp8q::error_element(load_as_f32(x.raw_data(), x.dtype(), r * x.stride(0) + c * x.stride(1)),
                          load_as_f32(q.raw_data(), q.dtype(), r * q.stride(0) + c * q.stride(1)),
                          si[(r / br) * nbc + c / bc], how, row);
    s.add(row);
  }
}

}  // namespace mixtrain::ref
