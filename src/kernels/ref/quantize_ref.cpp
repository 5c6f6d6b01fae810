// Scalar references of the quantization ops (kernels/quantize.h): one element at a time, any
// strides, the formula of kernels/quant_formula.h written out.
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/quant_formula.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/quantize.h"

namespace mixtrain::ref {
namespace {

float load_code(const Tensor& q, int64_t off) {
  if (q.dtype() == DType::i8) return static_cast<float>(static_cast<const int8_t*>(q.raw_data())[off]);
  return load_as_f32(q.raw_data(), q.dtype(), off);
}

}  // namespace

void quantize_rows(const Tensor& x, Tensor& q, Tensor& scale) {
  const int64_t R = x.size(0), C = x.size(1);
  const float qmax = quant::code_max(q.dtype());
  for (int64_t r = 0; r < R; ++r) {
    float amax = 0.f;
    bool finite = true;
    for (int64_t c = 0; c < C; ++c) {
      const float v = load_as_f32(x.raw_data(), x.dtype(), r * x.stride(0) + c * x.stride(1));
      if (!std::isfinite(v)) finite = false;
      amax = std::fmax(amax, std::fabs(v));
    }
    const quant::RowScale s = quant::row_scale(finite ? amax : NAN, qmax);
    for (int64_t c = 0; c < C; ++c) {
      const float v = load_as_f32(x.raw_data(), x.dtype(), r * x.stride(0) + c * x.stride(1)) * s.mul;
      const int64_t off = r * q.stride(0) + c * q.stride(1);
      if (q.dtype() == DType::i8)
        static_cast<int8_t*>(q.raw_data())[off] = finite ? quant::int8_code(v) : int8_t{0};
      else
        static_cast<fp8_e4m3*>(q.raw_data())[off] = quant::e4m3_code(finite ? v : 0.f);
    }
    store_from_f32(scale.raw_data(), DType::f32, r * scale.stride(0), s.scale);
  }
}

void dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out) {
  const int64_t R = q.size(0), C = q.size(1);
  for (int64_t r = 0; r < R; ++r) {
    const float s = static_cast<const float*>(scale.raw_data())[r * scale.stride(0)];
    for (int64_t c = 0; c < C; ++c)
      store_from_f32(out.raw_data(), out.dtype(), r * out.stride(0) + c * out.stride(1),
                     load_code(q, r * q.stride(0) + c * q.stride(1)) * s);
  }
}

void embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out) {
  const int64_t V = q.size(0), C = q.size(1), R = ids.numel();
  const int32_t* id = static_cast<const int32_t*>(ids.raw_data());
  const int64_t os = detail::last_stride(out);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t v = id[detail::elem_offset(ids, r)];
    if (v < 0 || v >= V)
      throw ArgumentError("embedding_dequantized: id " + std::to_string(v) + " at position " +
                          std::to_string(r) + " is outside [0, " + std::to_string(V) + ")");
    const float s = static_cast<const float*>(scale.raw_data())[v * scale.stride(0)];
    const int64_t ob = detail::row_offset(out, r);
    for (int64_t c = 0; c < C; ++c)
      store_from_f32(out.raw_data(), out.dtype(), ob + c * os,
                     load_code(q, v * q.stride(0) + c * q.stride(1)) * s);
  }
}

void gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  const int8_t* A = static_cast<const int8_t*>(a.raw_data());
  const int8_t* B = static_cast<const int8_t*>(b.raw_data());
  int32_t* Cp = static_cast<int32_t*>(acc.raw_data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += int64_t{A[m * a.stride(0) + k * a.stride(1)]} * int64_t{B[n * b.stride(0) + k * b.stride(1)]};
      Cp[m * acc.stride(0) + n * acc.stride(1)] = static_cast<int32_t>(s);
    }
}

void dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale, const Tensor* bias,
                     Tensor& out) {
  const int64_t M = acc.size(0), N = acc.size(1);
  const float* rs = static_cast<const float*>(row_scale.raw_data());
  const float* cs = static_cast<const float*>(col_scale.raw_data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float a = load_as_f32(acc.raw_data(), acc.dtype(), m * acc.stride(0) + n * acc.stride(1));
      const float b = bias ? static_cast<const float*>(bias->raw_data())[n * bias->stride(0)] : 0.f;
      store_from_f32(out.raw_data(), out.dtype(), m * out.stride(0) + n * out.stride(1),
                     std::fma(a * rs[m * row_scale.stride(0)], cs[n * col_scale.stride(0)], b));
    }
}

// The definition: the two ops, through an int32 accumulator (then GELU on the rounded result).
void gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale, const Tensor& col_scale,
                         const Tensor* bias, Tensor& out, bool gelu_erf) {
  Tensor acc = Tensor::empty({a.size(0), b.size(0)}, DType::i32, MemCategory::workspace, out.device());
  ref::gemm_s8(a, b, acc);
  ref::dequantize_gemm(acc, row_scale, col_scale, bias, out);
  if (gelu_erf) ref::activation(Activation::gelu_erf, out, out);
}

}  // namespace mixtrain::ref
