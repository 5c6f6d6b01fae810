// Fast CPU quantization kernels (kernels/quantize.h): rows split over threads, each row staged in
// fp32 and run through short vectorised loops (AVX-512 / AVX2 clones). They compute the formula of
// kernels/quant_formula.h: the harness (tests/kernels/ops/quantize_test.cpp) holds them to the
// reference bit for bit. Layouts without a row view go to the reference.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/quantize_avx512.h"
#include "kernels/cpu/simd_forms.h"
#include "kernels/quant_formula.h"
#include "mixtrain/kernels/quantize.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain {
namespace cpu {
namespace {

// max |x| over n elements, and whether all were finite (x * 0 is NaN exactly for inf and NaN).
// Both reductions are free of order, so the lanes may split them (without the simd reductions
// the compiler keeps fp32 sums in order: a scalar loop, 18% of an int8-dynamic evaluation on a
// Xeon with AMX): the max of |x| is exact, and x * 0 is +-0 for a finite x and NaN otherwise,
// so `bad` is NaN when any x is not finite, whatever the order, and +-0 == 0 otherwise.
MIXTRAIN_SIMD_CLONES float row_amax(const float* x, int64_t n, bool* finite) {
  float m = 0.f, bad = 0.f;
#pragma omp simd reduction(max : m) reduction(+ : bad)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m = a > m ? a : m;
    bad += x[i] * 0.f;
  }
  *finite = bad == 0.f;
  return m;
}

// quant::int8_code of x * mul, vectorised: adding and subtracting 1.5 * 2^23 rounds to the nearest
// integer, ties to even, for |v| < 2^22 (here |v| <= 127 (1 + 2^-23)), as nearbyint does. The
// product must be rounded to fp32 first, as the reference rounds it: no contraction of x * mul +
// 1.5 * 2^23 into one FMA (that moves products just below a tie, 63.4999.. rounding to 63.5, to 63).
MIXTRAIN_SIMD_CLONES __attribute__((optimize("fp-contract=off"))) void int8_codes(const float* x, float mul,
                                                                                  int8_t* q, int64_t n) {
  constexpr float kMagic = 12582912.f;  // 0x1.8p23
  for (int64_t i = 0; i < n; ++i) {
    float r = (x[i] * mul + kMagic) - kMagic;
    r = r > 127.f ? 127.f : r;
    r = r < -128.f ? -128.f : r;
    q[i] = static_cast<int8_t>(static_cast<int32_t>(r));
  }
}

MIXTRAIN_SIMD_CLONES void widen_int8_scaled(const int8_t* q, float s, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(q[i]) * s;
}

// One row of codes (i8 or E4M3) times s into dst (dtype t, fp32 staging in buf).
void dequantize_row(const void* q, DType qt, float s, void* dst, DType t, float* buf, int64_t n) {
  float* o = out_row(dst, t, buf);
  if (qt == DType::i8) {
    widen_int8_scaled(static_cast<const int8_t*>(q), s, o, n);
  } else {
    convert_fp8_e4m3_to_f32(static_cast<const fp8_e4m3*>(q), o, static_cast<size_t>(n));
    scale_f32(o, s, o, n);
  }
  store_row(o, dst, t, n);
}

bool code_rows(const Tensor& q, RowView& v) { return as_rows(q, v) && q.dim() == 2; }

}  // namespace
}  // namespace cpu

void cpu::quantize_rows(const Tensor& x, Tensor& q, Tensor& scale) {
  cpu::RowView xv, qv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::as_rows(x, xv) || !cpu::code_rows(q, qv) ||
      scale.stride(0) != 1)
    return ref::quantize_rows(x, q, scale);
  const int64_t R = xv.rows, C = xv.cols;
  const float qmax = quant::code_max(q.dtype());
  float* sc = scale.data<float>();
  const int nt = cpu::threads_for(R * C);
  // int8 codes of bf16 or f32 rows: the AVX-512 form where the CPU has it (quantize_avx512.h).
  if (q.dtype() == DType::i8 && (xv.dtype == DType::bf16 || xv.dtype == DType::f32) &&
      cpu::avx512_forms_run()) {
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; ++r)
      sc[r] = cpu::quantize_row_i8_avx512(xv.row(r), xv.dtype, C, static_cast<int8_t*>(qv.row(r)));
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    float* buf = cpu::scratch(0, C);
    const float* row = cpu::load_row(xv.row(r), xv.dtype, C, buf);
    bool finite = true;
    const float amax = cpu::row_amax(row, C, &finite);
    const quant::RowScale s = quant::row_scale(finite ? amax : NAN, qmax);
    sc[r] = s.scale;
    void* qr = qv.row(r);
    if (!finite) {
      std::memset(qr, 0, static_cast<size_t>(C));  // the code 0 in both formats
    } else if (q.dtype() == DType::i8) {
      cpu::int8_codes(row, s.mul, static_cast<int8_t*>(qr), C);
    } else {
      float* tmp = cpu::scratch(1, C);
      cpu::scale_f32(row, s.mul, tmp, C);
      convert_f32_to_fp8_e4m3(tmp, static_cast<fp8_e4m3*>(qr), static_cast<size_t>(C), Fp8Overflow::saturate);
    }
  }
}

void cpu::dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out) {
  cpu::RowView qv, ov;
  if (force_reference() || !cpu::fast_dtype(out.dtype()) || !cpu::code_rows(q, qv) ||
      !cpu::as_rows(out, ov) || scale.stride(0) != 1)
    return ref::dequantize_rows(q, scale, out);
  const int64_t R = qv.rows, C = qv.cols;
  const float* sc = scale.data<float>();
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r)
    cpu::dequantize_row(qv.row(r), qv.dtype, sc[r], ov.row(r), ov.dtype, cpu::scratch(0, C), C);
}

void cpu::embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out) {
  cpu::RowView qv, ov;
  if (force_reference() || !cpu::fast_dtype(out.dtype()) || !cpu::code_rows(q, qv) ||
      !cpu::as_rows(out, ov) || scale.stride(0) != 1 || !ids.is_contiguous())
    return ref::embedding_dequantized(q, scale, ids, out);
  const int32_t* id = static_cast<const int32_t*>(ids.raw_data());
  const int64_t R = ids.numel(), V = qv.rows, C = qv.cols;
  for (int64_t r = 0; r < R; ++r)  // before any thread starts: an exception cannot leave a parallel region
    if (id[r] < 0 || id[r] >= V)
      throw ArgumentError("embedding_dequantized: id " + std::to_string(id[r]) + " at position " +
                          std::to_string(r) + " is outside [0, " + std::to_string(V) + ")");
  const float* sc = scale.data<float>();
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r)
    cpu::dequantize_row(qv.row(id[r]), qv.dtype, sc[id[r]], ov.row(r), ov.dtype, cpu::scratch(0, C), C);
}

namespace cpu {
namespace {
// One output row of the epilogue: o[n] = fma(float(acc[n]) * rs, cs[n], b[n]).
MIXTRAIN_SIMD_CLONES void scale_acc_i32(const int32_t* acc, float rs, const float* cs, const float* b,
                                        float* o, int64_t n) {
  if (b) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = std::fma(static_cast<float>(acc[i]) * rs, cs[i], b[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = std::fma(static_cast<float>(acc[i]) * rs, cs[i], 0.f);
  }
}
MIXTRAIN_SIMD_CLONES void scale_acc_f32(const float* acc, float rs, const float* cs, const float* b, float* o,
                                        int64_t n) {
  if (b) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = std::fma(acc[i] * rs, cs[i], b[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = std::fma(acc[i] * rs, cs[i], 0.f);
  }
}
}  // namespace
}  // namespace cpu

void cpu::dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale,
                          const Tensor* bias, Tensor& out) {
  cpu::RowView av, ov;
  if (force_reference() || !cpu::fast_dtype(out.dtype()) || !cpu::as_rows(acc, av) ||
      !cpu::as_rows(out, ov) || row_scale.stride(0) != 1 || col_scale.stride(0) != 1 ||
      (bias && bias->stride(0) != 1))
    return ref::dequantize_gemm(acc, row_scale, col_scale, bias, out);
  const int64_t M = av.rows, N = av.cols;
  const float* rs = row_scale.data<float>();
  const float* cs = col_scale.data<float>();
  const float* b = bias ? bias->data<float>() : nullptr;
  const int nt = cpu::threads_for(M * N);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t m = 0; m < M; ++m) {
    float* o = cpu::out_row(ov.row(m), ov.dtype, cpu::scratch(0, N));
    if (av.dtype == DType::i32)
      cpu::scale_acc_i32(static_cast<const int32_t*>(av.row(m)), rs[m], cs, b, o, N);
    else
      cpu::scale_acc_f32(static_cast<const float*>(av.row(m)), rs[m], cs, b, o, N);
    cpu::store_row(o, ov.row(m), ov.dtype, N);
  }
}

}  // namespace mixtrain
