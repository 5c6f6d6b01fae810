// Fast CPU elementwise ops (cpu::add, mul, scale, gelu): the tensors are walked as
// (row, column chunk) work items; 16-bit chunks are staged through fp32 stack buffers, the math is
// a vectorised fp32 loop, and each result is rounded once into out. Each element's value depends
// only on its inputs, so results are identical for any thread count.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/gelu_avx512.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {

MIXTRAIN_SIMD_CLONES void add_f32(const float* a, const float* b, float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
MIXTRAIN_SIMD_CLONES void mul_f32(const float* a, const float* b, float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
}
// GELU, tanh form, via 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) (no cancellation for x < 0; the
// reference uses the same identity).
MIXTRAIN_SIMD_CLONES void gelu_f32(const float* x, float* o, int64_t n) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = k * (v + 0.044715f * v * v * v);
    o[i] = v / (1.f + exp_f32(-2.f * u));
  }
}

// add/mul: b has a's shape or is a row (C) broadcast over a's rows.
template <typename F>
void binary(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  RowView in[2], ov;
  const Tensor ak = rows_or_copy(a, in[0]);
  Tensor bk = b;
  if (b.shape() == a.shape()) {
    bk = rows_or_copy(b, in[1]);
  } else {  // (C) row
    if (b.stride(0) != 1 && b.numel() > 1) bk = b.contiguous();
    as_rows(bk, in[1]);
    in[1].rows = in[0].rows;
    in[1].row_stride = 0;
  }
  Tensor o = rows_for_output(out, ov);
  elementwise<2>(in, ov, f);
  finish_output(o, out);
}
}  // namespace

MIXTRAIN_SIMD_CLONES void widen_bf16_row(const bf16* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(src[i]);
}

MIXTRAIN_SIMD_CLONES void round_bf16_row(const float* src, bf16* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(src[i]);
}

MIXTRAIN_SIMD_CLONES void scale_f32(const float* a, float s, float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = s * a[i];
}

MIXTRAIN_SIMD_CLONES void round_bf16_row_scaled(const float* src, float s, bf16* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(src[i] * s);
}
}  // namespace cpu

void cpu::add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (!cpu::all_fast({&a, &b, &out})) return ref::add(a, b, out);
  cpu::binary(a, b, out, [](const float* const* p, float* o, int64_t n) { cpu::add_f32(p[0], p[1], o, n); });
}

void cpu::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (!cpu::all_fast({&a, &b, &out})) return ref::mul(a, b, out);
  cpu::binary(a, b, out, [](const float* const* p, float* o, int64_t n) { cpu::mul_f32(p[0], p[1], o, n); });
}

void cpu::scale(const Tensor& a, float s, Tensor& out) {
  if (!cpu::all_fast({&a, &out})) return ref::scale(a, s, out);
  cpu::RowView in[1], ov;
  const Tensor ak = cpu::rows_or_copy(a, in[0]);
  Tensor o = cpu::rows_for_output(out, ov);
  cpu::elementwise<1>(in, ov,
                      [s](const float* const* p, float* dst, int64_t n) { cpu::scale_f32(p[0], s, dst, n); });
  cpu::finish_output(o, out);
}

void cpu::gelu(const Tensor& x, Tensor& out) {
  if (!cpu::all_fast({&x, &out})) return ref::gelu(x, out);
  cpu::RowView in[1], ov;
  const Tensor xk = cpu::rows_or_copy(x, in[0]);
  Tensor o = cpu::rows_for_output(out, ov);
  if (cpu::gelu_avx512_takes({in[0].dtype, ov.dtype})) {
    const DType xt = in[0].dtype, ot = ov.dtype;
    cpu::elementwise_unstaged<1>(in, ov, [=](const void* const* p, void* dst, int64_t n) {
      cpu::gelu_row_avx512(p[0], xt, dst, ot, n);
    });
  } else {
    cpu::elementwise<1>(in, ov,
                        [](const float* const* p, float* dst, int64_t n) { cpu::gelu_f32(p[0], dst, n); });
  }
  cpu::finish_output(o, out);
}

}  // namespace mixtrain
