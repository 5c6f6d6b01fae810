// The fp8 training recipes' quantization (shared/reference/low-bit.md, "fp8 formats and recipes"):
// one kernel that cuts a matrix into blocks, takes each block's amax, turns it into a scale by the
// recipe's rule and casts every element, scaled, to E4M3 or E5M2 with saturation. The recipes are
// block shapes and rules over it:
//
//   recipe (source)                          block (rows x cols)              rule
//   current scaling (TE Float8CurrentScaling, whole tensor (0 x 0)                fp32
//     torchao tensorwise)
//   delayed scaling (TE DelayedScaling)      whole tensor, scale given        fp32 (from the history)
//   rowwise (torchao rowwise)                1 x 0 (or 0 x 1 for the          fp32
//                                            transposed use)
//   MXFP8 (OCP MX v1.0)                      1 x 32 along the reduction dim   e8m0
//   block (TE Float8BlockScaling,            1 x 128 activations/gradients,   pow2
//     DeepSeek-V3 section 3.3)               128 x 128 weights
//
// The definitions (the reference computes them, the fast kernel bit for bit):
//   amax       = max |x| over the block; a block holding inf or NaN has amax +inf (not finite).
//   fp8_max    = 448 (E4M3), 57344 (E5M2).
//   fp32 rule  (Transformer Engine's compute_scale_from_amax, epsilon 0):
//              scale = fp8_max / amax (fp32 division, round to nearest); inf (amax tiny) -> FLT_MAX;
//              amax == 0 -> scale 1.
//   pow2 rule  the fp32 rule's scale with its mantissa bits cleared (a power of two at or below it,
//              so the block's amax still fits: TE's default for Float8BlockScaling).
//   e8m0 rule  (OCP Microscaling v1.0, section 6.3) shared = floor(log2(amax)) - emax, emax = 8
//              (E4M3) or 15 (E5M2), clamped to the E8M0 range [-127, 127]; scale = 2^-shared;
//              amax == 0 -> shared = -127. The largest element then lands in [2^emax, 2^(emax+1))
//              and may round past fp8_max: it saturates, as the spec's conversion does. (TE's own
//              MXFP8 cast rounds the exponent up instead; we follow the spec.)
//   given      (delayed scaling) scale = the given value.
//   scale_inv  = 1 / scale (fp32 division); the dequantized element is code * scale_inv.
//   code       = fp8(x * scale): the fp32 product rounded to nearest even into the format,
//              saturating to +-fp8_max (CUDA's __NV_SATFINITE cast, which Transformer Engine uses).
//   A block that is not finite: scale = scale_inv = NaN and every element NaN, so the trouble stays
//   visible downstream (Transformer Engine returns scale 1 there and the saturating cast turns inf
//   into fp8_max: an overflow becomes a silent clip). Its amax is reported as +inf.
//
// What q holds: the codes (q's dtype the format, f8_e4m3 or f8_e5m2), or the codes as values of a
// wider type (bf16 / f32: every E4M3 and E5M2 value is a bf16 value, so a bf16 GEMM on them with
// fp32 accumulation is the fp8 GEMM exactly), or with `dequantize` the values code * scale_inv
// rounded to q's dtype (exact in bf16 for the pow2 and e8m0 rules, whose scale_inv is a power of
// two, unless the product falls below bf16's subnormals).
#pragma once
#include <cstdint>
#include <string>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

enum class Fp8ScaleRule : uint8_t { fp32, pow2, e8m0 };

struct Fp8Quant {
  DType format = DType::f8_e4m3;  // f8_e4m3 or f8_e5m2
  int64_t block_rows = 0;         // rows of a block; 0: all rows
  int64_t block_cols = 0;         // columns of a block; 0: all columns
  Fp8ScaleRule rule = Fp8ScaleRule::fp32;
  bool dequantize = false;  // q = code * scale_inv (q bf16 or f32), else q = code
};

// The blocks of a quantization of an (R, C) matrix: a block's size (how's, 0 meaning the whole
// dimension, at least 1) and how many lie along each dimension (partial edge blocks count): the
// shape of scale_inv and amax.
struct Fp8Blocks {
  int64_t rows, cols;            // a block's
  int64_t grid_rows, grid_cols;  // blocks along R and along C
  Shape grid() const { return {grid_rows, grid_cols}; }
};
inline Fp8Blocks fp8_blocks(const Fp8Quant& how, int64_t R, int64_t C) {
  const int64_t br = how.block_rows > 0 ? how.block_rows : (R > 1 ? R : 1);
  const int64_t bc = how.block_cols > 0 ? how.block_cols : (C > 1 ? C : 1);
  return {br, bc, (R + br - 1) / br, (C + bc - 1) / bc};
}

// The largest finite value of an fp8 format: 448 (f8_e4m3), 57344 (f8_e5m2).
float fp8_max(DType format);

// x (R, C) f32/bf16/f16, any strides -> q (R, C) (the format, or bf16/f32: see above),
// scale_inv (ceil(R / br), ceil(C / bc)) f32 and amax (same shape) f32, both contiguous. `scale`
// (optional, scale_inv's shape, f32, rule fp32 only) gives the scales instead of the amax (delayed
// scaling); amax is still computed (the history's next entry). Partial blocks at the edges are
// blocks of their own size.
void fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q, Tensor& scale_inv,
                  Tensor& amax);

// How well a quantization kept x (the fp8 diagnostics, `--numerics`): over the finite elements of
// x in finite blocks, with code = q (codes) or q / scale_inv (dequantized) and the dequantized
// value x~ = code * scale_inv (in double):
//   saturated  |code| == fp8_max and |x| > fp8_max * scale_inv (the cast clipped it);
//   underflow  x != 0 and |code| below the format's smallest normal (2^-6 E4M3, 2^-14 E5M2):
//              zero or subnormal, with 3 (2) significant bits or fewer;
//   err2, ref2 sums of (x~ - x)^2 and x^2 (each row's sum in double, the rows added in order).
struct Fp8ErrorStats {
  int64_t count = 0, saturated = 0, underflow = 0;
  double err2 = 0, ref2 = 0;
  void add(const Fp8ErrorStats& o) {
    count += o.count;
    saturated += o.saturated;
    underflow += o.underflow;
    err2 += o.err2;
    ref2 += o.ref2;
  }
  double relative_error() const;  // sqrt(err2 / ref2), 0 when ref2 is 0
};
// x (R, C) and what fp8_quantize(x, how, ...) made of it (q, scale_inv): the stats, added into s.
void fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                     Fp8ErrorStats& s);

// The recipes (the table above) and how each quantizes one operand of one GEMM. `weight`: the
// operand is a weight (the block recipe tiles weights 128 x 128); `reduce_along_cols`: the GEMM
// sums along the operand's columns (x (M, K) and w (N, K) in the forward GEMM, dy (M, N) in the
// input-gradient GEMM), else along its rows (w in the input-gradient GEMM, dy and x in the
// weight-gradient GEMM): the rowwise, MXFP8 and 1 x 128 blocks lie along the summed dimension.
// The recipes with power-of-two scales (mxfp8, block) dequantize (exact in bf16); the others keep
// codes and their scales are applied to the GEMM's fp32 result.
enum class Fp8Recipe : uint8_t { delayed, current, rowwise, mxfp8, block };
Fp8Quant fp8_operand_quant(Fp8Recipe recipe, DType format, bool weight, bool reduce_along_cols);
const char* fp8_recipe_name(Fp8Recipe r);  // "delayed"
// ArgumentError "unknown fp8 recipe 'x' (valid: delayed, current, rowwise, mxfp8, block)".
Fp8Recipe parse_fp8_recipe(const std::string& s);

namespace ref {
void fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q, Tensor& scale_inv,
                  Tensor& amax);
void fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                     Fp8ErrorStats& s);
}  // namespace ref

}  // namespace mixtrain
