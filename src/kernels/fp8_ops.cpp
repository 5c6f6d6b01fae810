// The public fp8 quantization op (kernels/fp8.h): argument checks, then the device's backend.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/fp8.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const Fp8Quant&, const Tensor*, Tensor&, Tensor&, Tensor&)> fp8_quantize{
    "fp8_quantize", ref::fp8_quantize, cpu::fp8_quantize, meta::fp8_quantize};
const Op<void(const Tensor&, const Fp8Quant&, const Tensor&, const Tensor&, Fp8ErrorStats&)> fp8_quant_error{
    "fp8_quant_error", ref::fp8_quant_error, cpu::fp8_quant_error, meta::fp8_quant_error};
}  // namespace ops

double Fp8ErrorStats::relative_error() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0; }

void fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                     Fp8ErrorStats& s) {
  ProfileScope prof(WorkKind::casts);
  prof.moves(detail::bytes_of({&x, &q}));
  const char* op = "fp8_quant_error";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"q", &q}, {"scale_inv", &scale_inv}});
  if (how.format != DType::f8_e4m3 && how.format != DType::f8_e5m2)
    throw DTypeError(std::string(op) + ": the format " + std::string(dtype_name(how.format)) +
                     " is not an fp8 format");
  if (x.dim() != 2 || !(q.shape() == x.shape()))
    throw ShapeError(std::string(op) + ": x " + x.to_string() + " and q " + q.to_string() +
                     " must be the same (R, C)");
  const Shape grid = fp8_blocks(how, x.size(0), x.size(1)).grid();
  detail::check_dtype(op, {"scale_inv", &scale_inv}, DType::f32);
  if (!(scale_inv.shape() == grid) || !scale_inv.is_contiguous())
    throw ShapeError(std::string(op) + ": scale_inv " + scale_inv.to_string() + " must be contiguous " +
                     grid.to_string());
  ops::fp8_quant_error(dev, x, how, q, scale_inv, s);
}

float fp8_max(DType format) {
  if (format == DType::f8_e4m3) return 448.f;
  if (format == DType::f8_e5m2) return 57344.f;
  throw DTypeError("fp8_max: " + std::string(dtype_name(format)) +
                   " is not an fp8 format (f8_e4m3, f8_e5m2)");
}

Fp8Quant fp8_operand_quant(Fp8Recipe recipe, DType format, bool weight, bool reduce_along_cols) {
  Fp8Quant q;
  q.format = format;
  const auto along = [&](int64_t n) {  // blocks of n along the summed dimension
    q.block_rows = reduce_along_cols ? 1 : n;
    q.block_cols = reduce_along_cols ? n : 1;
  };
  switch (recipe) {
    case Fp8Recipe::delayed:
    case Fp8Recipe::current:
      break;  // the whole tensor
    case Fp8Recipe::rowwise:
      along(0);  // a scale per row (or column) over the whole summed dimension
      break;
    case Fp8Recipe::mxfp8:
      along(32);
      q.rule = Fp8ScaleRule::e8m0;
      q.dequantize = true;
      break;
    case Fp8Recipe::block:
      if (weight)
        q.block_rows = q.block_cols = 128;
      else
        along(128);
      q.rule = Fp8ScaleRule::pow2;
      q.dequantize = true;
      break;
  }
  return q;
}

const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::delayed:
      return "delayed";
    case Fp8Recipe::current:
      return "current";
    case Fp8Recipe::rowwise:
      return "rowwise";
    case Fp8Recipe::mxfp8:
      return "mxfp8";
    case Fp8Recipe::block:
      return "block";
  }
  return "?";
}

Fp8Recipe parse_fp8_recipe(const std::string& s) {
  for (Fp8Recipe r :
       {Fp8Recipe::delayed, Fp8Recipe::current, Fp8Recipe::rowwise, Fp8Recipe::mxfp8, Fp8Recipe::block})
    if (s == fp8_recipe_name(r)) return r;
  throw ArgumentError("unknown fp8 recipe '" + s + "' (valid: delayed, current, rowwise, mxfp8, block)");
}

void fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q, Tensor& scale_inv,
                  Tensor& amax) {
  ProfileScope prof(WorkKind::casts);
  prof.moves(detail::bytes_of({&x, &q}));
  const char* op = "fp8_quantize";
  using detail::describe;
  const Device dev = detail::check_defined_same_device(
      op, {{"x", &x}, {"q", &q}, {"scale_inv", &scale_inv}, {"amax", &amax}});
  if (how.format != DType::f8_e4m3 && how.format != DType::f8_e5m2)
    throw DTypeError(std::string(op) + ": the format " + std::string(dtype_name(how.format)) +
                     " is not an fp8 format (f8_e4m3, f8_e5m2)");
  const DType xt = x.dtype();
  if (xt != DType::f32 && xt != DType::bf16 && xt != DType::f16)
    throw DTypeError(std::string(op) + ": " + describe("x", x) + " must be f32, bf16 or f16");
  const DType qt = q.dtype();
  if (how.dequantize ? (qt != DType::bf16 && qt != DType::f32)
                     : (qt != how.format && qt != DType::bf16 && qt != DType::f32))
    throw DTypeError(std::string(op) + ": " + describe("q", q) + " must be " +
                     (how.dequantize ? std::string("bf16 or f32 (dequantized values)")
                                     : std::string(dtype_name(how.format)) + ", bf16 or f32"));
  if (x.dim() != 2 || !(q.shape() == x.shape()))
    throw ShapeError(std::string(op) + ": x " + x.to_string() + " and q " + q.to_string() +
                     " must be the same (R, C)");
  if (how.block_rows < 0 || how.block_cols < 0)
    throw ArgumentError(std::string(op) + ": block " + std::to_string(how.block_rows) + " x " +
                        std::to_string(how.block_cols) + " (0 = the whole dimension, else positive)");
  const Fp8Blocks bl = fp8_blocks(how, x.size(0), x.size(1));
  const Shape grid = bl.grid();
  for (const auto& [name, t] : {std::pair{"scale_inv", &scale_inv}, std::pair{"amax", &amax}}) {
    detail::check_dtype(op, {name, t}, DType::f32);
    if (!(t->shape() == grid) || !t->is_contiguous())
      throw ShapeError(std::string(op) + ": " + describe(name, *t) + " must be contiguous " +
                       grid.to_string() + ": one per " + std::to_string(bl.rows) + " x " +
                       std::to_string(bl.cols) + " block");
  }
  if (scale) {
    if (!(scale->device() == dev)) throw ArgumentError(std::string(op) + ": scale is on another device");
    detail::check_dtype(op, {"scale", scale}, DType::f32);
    if (!(scale->shape() == grid) || !scale->is_contiguous())
      throw ShapeError(std::string(op) + ": " + describe("scale", *scale) + " must be contiguous " +
                       grid.to_string());
    if (how.rule != Fp8ScaleRule::fp32)
      throw ArgumentError(std::string(op) + ": given scales take the fp32 rule (delayed scaling)");
    if (!dev.is_meta()) {
      const float* s = scale->data<float>();
      for (int64_t i = 0; i < scale->numel(); ++i)
        if (!(s[i] > 0.f) || !std::isfinite(s[i]))
          throw ArgumentError(std::string(op) + ": scale[" + std::to_string(i) +
                              "] = " + std::to_string(s[i]) + " must be positive and finite");
    }
  }
  ops::fp8_quantize(dev, x, how, scale, q, scale_inv, amax);
}

}  // namespace mixtrain
