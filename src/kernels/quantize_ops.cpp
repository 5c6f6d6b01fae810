// Public quantization ops (kernels/quantize.h): argument checks, then the device's backend.
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/quantize.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, Tensor&, Tensor&)> quantize_rows{"quantize_rows", ref::quantize_rows,
                                                              cpu::quantize_rows, meta::quantize_rows};
const Op<void(const Tensor&, const Tensor&, Tensor&)> dequantize_rows{
    "dequantize_rows", ref::dequantize_rows, cpu::dequantize_rows, meta::dequantize_rows};
const Op<void(const Tensor&, const Tensor&, const Tensor&, Tensor&)> embedding_dequantized{
    "embedding_dequantized", ref::embedding_dequantized, cpu::embedding_dequantized,
    meta::embedding_dequantized};
const Op<void(const Tensor&, const Tensor&, Tensor&)> gemm_s8{"gemm_s8", ref::gemm_s8, cpu::gemm_s8,
                                                              meta::gemm_s8};
const Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor*, Tensor&)> dequantize_gemm{
    "dequantize_gemm", ref::dequantize_gemm, cpu::dequantize_gemm, meta::dequantize_gemm};
const Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor*, Tensor&, bool)>
    gemm_s8_dequantized{"gemm_s8_dequantized", ref::gemm_s8_dequantized, cpu::gemm_s8_dequantized,
                        meta::gemm_s8_dequantized};
}  // namespace ops

namespace {
using detail::describe;

bool is_code_dtype(DType t) { return t == DType::i8 || t == DType::f8_e4m3; }

void check_codes(const char* op, const char* name, const Tensor& q) {
  if (!is_code_dtype(q.dtype()))
    throw DTypeError(std::string(op) + ": " + describe(name, q) + " must be i8 or f8_e4m3");
  if (q.dim() != 2) throw ShapeError(std::string(op) + ": " + describe(name, q) + " must be (R, C)");
}

void check_out_float(const char* op, const char* name, const Tensor& t) {
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::bf16 && d != DType::f16)
    throw DTypeError(std::string(op) + ": " + describe(name, t) + " must be f32, bf16 or f16");
}

// A vector (n) f32 of per-row or per-column values.
void check_vector(const char* op, const char* name, const Tensor& v, int64_t n, const char* what) {
  detail::check_dtype(op, {name, &v}, DType::f32);
  if (v.dim() != 1 || v.size(0) != n)
    throw ShapeError(std::string(op) + ": " + describe(name, v) + " must be (" + std::to_string(n) +
                     "): one per " + what);
}
}  // namespace

void quantize_rows(const Tensor& x, Tensor& q, Tensor& scale) {
  ProfileScope prof(WorkKind::casts);
  prof.moves(detail::bytes_of({&x, &q, &scale}));
  const char* op = "quantize_rows";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"q", &q}, {"scale", &scale}});
  check_out_float(op, "x", x);
  check_codes(op, "q", q);
  if (x.dim() != 2 || !(q.shape() == x.shape()))
    throw ShapeError(std::string(op) + ": x " + x.to_string() + " and q " + q.to_string() +
                     " must be the same (R, C)");
  check_vector(op, "scale", scale, x.size(0), "row");
  ops::quantize_rows(dev, x, q, scale);
}

void dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out) {
  ProfileScope prof(WorkKind::casts);
  prof.moves(detail::bytes_of({&q, &scale, &out}));
  const char* op = "dequantize_rows";
  const Device dev = detail::check_defined_same_device(op, {{"q", &q}, {"scale", &scale}, {"out", &out}});
  check_codes(op, "q", q);
  check_out_float(op, "out", out);
  if (!(out.shape() == q.shape()))
    throw ShapeError(std::string(op) + ": out " + out.to_string() + " must match q " + q.to_string());
  check_vector(op, "scale", scale, q.size(0), "row");
  ops::dequantize_rows(dev, q, scale, out);
}

void embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  // The rows looked up (one-byte codes and a scale each), not the whole table.
  prof.moves(detail::bytes_of({&ids, &out}) + out.numel() + ids.numel() * 4);
  const char* op = "embedding_dequantized";
  const Device dev =
      detail::check_defined_same_device(op, {{"q", &q}, {"scale", &scale}, {"ids", &ids}, {"out", &out}});
  check_codes(op, "q", q);
  check_out_float(op, "out", out);
  detail::check_dtype(op, {"ids", &ids}, DType::i32);
  check_vector(op, "scale", scale, q.size(0), "row of q");
  detail::check_table_lookup(op, "q", q, ids, out, dev);
  ops::embedding_dequantized(dev, q, scale, ids, out);
}

namespace {
// a (M, K) i8 and b (N, K) i8 with K small enough for the int32 accumulator.
void check_s8_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_dtype(op, {"a", &a}, DType::i8);
  detail::check_dtype(op, {"b", &b}, DType::i8);
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(1))
    throw ShapeError(std::string(op) + ": a " + a.to_string() + " (M, K) and b " + b.to_string() +
                     " (N, K) do not match");
  if (a.size(1) > 131072)
    throw ArgumentError(std::string(op) + ": K = " + std::to_string(a.size(1)) +
                        " could overflow the int32 accumulator (at most 131072)");
}

// out (M, N) f32/bf16/f16, row_scale (M), col_scale (N), bias (N) or null.
void check_epilogue(const char* op, int64_t M, int64_t N, const Tensor& row_scale, const Tensor& col_scale,
                    const Tensor* bias, const Tensor& out, Device dev) {
  if (out.dim() != 2 || out.size(0) != M || out.size(1) != N)
    throw ShapeError(std::string(op) + ": out " + out.to_string() + " must be (" + std::to_string(M) + ", " +
                     std::to_string(N) + ")");
  check_out_float(op, "out", out);
  check_vector(op, "row_scale", row_scale, M, "row");
  check_vector(op, "col_scale", col_scale, N, "column");
  if (bias) {
    if (!(bias->device() == dev)) throw ArgumentError(std::string(op) + ": bias is on another device");
    check_vector(op, "bias", *bias, N, "column");
  }
}
}  // namespace

void gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc) {
  ProfileScope prof(WorkKind::gemm);
  prof.moves(detail::bytes_of({&a, &b, &acc}));
  const char* op = "gemm_s8";
  const Device dev = detail::check_defined_same_device(op, {{"a", &a}, {"b", &b}, {"acc", &acc}});
  check_s8_operands(op, a, b);
  detail::check_dtype(op, {"acc", &acc}, DType::i32);
  if (acc.dim() != 2 || acc.size(0) != a.size(0) || acc.size(1) != b.size(0))
    throw ShapeError(std::string(op) + ": acc " + acc.to_string() + " must be (M, N) = (" +
                     std::to_string(a.size(0)) + ", " + std::to_string(b.size(0)) + ")");
  ops::gemm_s8(dev, a, b, acc);
}

void dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale, const Tensor* bias,
                     Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&acc, &row_scale, &col_scale, bias, &out}));
  const char* op = "dequantize_gemm";
  const Device dev = detail::check_defined_same_device(
      op, {{"acc", &acc}, {"row_scale", &row_scale}, {"col_scale", &col_scale}, {"out", &out}});
  if (acc.dtype() != DType::i32 && acc.dtype() != DType::f32)
    throw DTypeError(std::string(op) + ": " + describe("acc", acc) + " must be i32 or f32");
  if (acc.dim() != 2) throw ShapeError(std::string(op) + ": acc " + acc.to_string() + " must be (M, N)");
  check_epilogue(op, acc.size(0), acc.size(1), row_scale, col_scale, bias, out, dev);
  ops::dequantize_gemm(dev, acc, row_scale, col_scale, bias, out);
}

void gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale, const Tensor& col_scale,
                         const Tensor* bias, Tensor& out, bool gelu_erf) {
  ProfileScope prof(WorkKind::gemm);
  prof.moves(detail::bytes_of({&a, &b, &row_scale, &col_scale, bias, &out}));
  const char* op = "gemm_s8_dequantized";
  const Device dev = detail::check_defined_same_device(
      op, {{"a", &a}, {"b", &b}, {"row_scale", &row_scale}, {"col_scale", &col_scale}, {"out", &out}});
  check_s8_operands(op, a, b);
  check_epilogue(op, a.size(0), b.size(0), row_scale, col_scale, bias, out, dev);
  ops::gemm_s8_dequantized(dev, a, b, row_scale, col_scale, bias, out, gelu_erf);
}

}  // namespace mixtrain
