// Pieces shared by the forward functions and their backward rules (not public API).
#pragma once
#include <string>
#include <vector>

#include "kernels/attention_ops.h"  // the blocked attention, heads_copy, dropout_mask
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::autograd {

// The (B, H, T, D) strided view of q (which=0), k (1) or v (2) inside qkv (B, T, 3C).
Tensor heads_view(const Tensor& qkv, int which, int64_t n_head);

// lm_head_loss, one chunk of rows, as its forward (gradients made early) and its fp16 backward
// (logits made again) both run it. The GEMMs' operands: w itself, or, where the 16-bit GEMMs
// convert their inputs to fp32 (gemm_converts_to_f32: no bf16 / fp16 units), w converted once for
// the op (lm_head_gemm_weight, MemCategory::workspace) instead of in two GEMMs of every chunk (V x
// C each time), and each chunk's rows and logits' gradient converted once for its three GEMMs
// (lm_head_gemm_operand): the GEMMs run the fp32 problems they would have run on the values they
// would have converted, so the bits are the same, and no GEMM keeps a converted copy of its own
// (lm_head_gemm_weight releases the GEMMs' per-thread buffers, gemm_scratch_release). On Zen 3
// (gpt-mini, V = 16384, bf16-mixed): the fused head from 0.89x to 1.02x of the unfused one's speed,
// its peak 684.7 -> 676.7 MiB (bench/RESULTS.md).
Tensor lm_head_gemm_weight(const Tensor& w);
Tensor lm_head_gemm_operand(const Tensor& a, const Tensor& w_gemm);  // a in w_gemm's dtype
// The logits (r, V) in `dtype` (x's, as the unfused matmul makes them; MemCategory::workspace) of
// the rows xg (r, C) against w (V, C), both GEMM operands as above.
Tensor lm_head_logits(const Tensor& xg, const Tensor& w, DType dtype);
// Their gradient for an upstream gradient dloss of the batch's mean loss over `count` rows
// (cross_entropy_backward divides by the chunk's own count of non-ignored targets: dloss is rescaled
// to the batch's), made in the logits' dtype and returned as a GEMM operand (lm_head_gemm_operand);
// the logits are released once it is made, then dxc (when given) receives the rows dlogits w.
Tensor lm_head_dlogits(Tensor& logits, const Tensor& targets, float dloss, int64_t count, const Tensor& w,
                       Tensor* dxc);
}  // namespace mixtrain::autograd

namespace mixtrain::autograd {

// What a linear layer's forward sets up around its GEMM (linear, fp8_linear, quantized_linear),
// after checking that x (..., IN) and the weight (OUT, IN) fit (ShapeError naming `op`): x's rows
// (M, IN), the output (..., OUT) in out_dtype and its rows (M, OUT), the bias widened to f32
// (undefined without one).
struct LinearFrame {
  Tensor x2, out, out2, bias32;
};
inline LinearFrame linear_frame(const char* op, const Tensor& xv, const Tensor& w, DType out_dtype,
                                const Tensor* bias) {
  if (w.dim() != 2 || xv.dim() < 1 || xv.size(-1) != w.size(1))
    throw ShapeError(std::string(op) + ": x " + xv.to_string() + " and weight " + w.to_string() +
                     " (OUT, IN) do not match");
  const int64_t in = w.size(1), outf = w.size(0);
  LinearFrame f;
  f.x2 = xv.contiguous().reshape({-1, in});
  Shape out_shape = xv.shape();
  out_shape[out_shape.size() - 1] = outf;
  f.out = Tensor::empty(out_shape, out_dtype);
  f.out2 = f.out.reshape({-1, outf});
  if (bias) f.bias32 = bias->dtype() == DType::f32 ? *bias : bias->to(DType::f32, MemCategory::workspace);
  return f;
}

struct Fp8Site;
enum class Fp8Role : uint8_t;

// One GEMM operand quantized by an fp8 site's recipe (autograd/fp8_linear.h, src/autograd/fp8_gemm.cpp):
// q in bf16 (the codes, or the dequantized values for the power-of-two recipes), the scale grid.
struct Fp8Operand {
  Tensor q;          // (R, C) bf16
  Tensor scale_inv;  // the block grid, f32
  bool dequantized = false;
};
// t (R, C) quantized for a GEMM that sums along its columns (reduce_along_cols) or its rows; the
// delayed recipe casts with the site's scale for the role; every recipe records the amax.
// `category`: what q's memory counts as (activations when backward keeps it).
Fp8Operand fp8_operand(const Tensor& t, Fp8Site& site, Fp8Role role, bool reduce_along_cols,
                       MemCategory category = MemCategory::workspace);
// out (M, N) = op(a) op(b) as the fp8 GEMM (+ bias (N) f32, or += out when accumulate): a bf16
// GEMM with fp32 accumulation on the operands, the scales applied to its fp32 result as
// fma(acc * row_scale, col_scale, bias) (kernels/quantize.h: dequantize_gemm) unless dequantized;
// per-tensor scales (delayed, current) as the GEMM's alpha = sa * sb: alpha * acc + bias.
// Which quantizations backward can take from forward (the recipe's operand does not depend on
// the GEMM): all for the per-tensor recipes, the weight's 128 x 128 tiles for block.
inline bool fp8_reuses_input(Fp8Recipe r) { return r == Fp8Recipe::delayed || r == Fp8Recipe::current; }
inline bool fp8_reuses_weight(Fp8Recipe r) { return fp8_reuses_input(r) || r == Fp8Recipe::block; }
void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, bool ta, bool tb, Tensor& out, const Tensor* bias,
              bool accumulate);
}  // namespace mixtrain::autograd
