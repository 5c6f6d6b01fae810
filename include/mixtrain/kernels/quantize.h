// Quantization kernels for inference in 8 bits: symmetric per-row quantization to int8 or E4M3
// with one fp32 scale per row, the exact integer GEMM, and the dequantizing epilogue. One row is
// one output channel of a weight (OUT, IN) or one token of an activation (tokens, IN), so the
// same op serves per-channel weights and per-token activations.
//
// The definitions (what the reference computes, and the fast kernels bit for bit):
//   amax[r]   = max |x[r, :]| (exact: a maximum does not depend on the order)
//   int8:     scale[r] = amax / 127,  q = clamp(round_half_even(x * (127 / amax)), -128, 127)
//             (the symmetric per-token / per-channel int8 of SmoothQuant and vLLM's
//             scaled_int8_quant: the multiplier 127/amax, the stored dequantization scale amax/127)
//   E4M3:     scale[r] = amax / 448,  q = e4m3_saturating(x * (448 / amax)), round to nearest even
//             (Transformer Engine's current scaling: scale = fp8_max / amax, scale_inv stored)
//   amax == 0:        q = 0, scale = 1 (any scale dequantizes the row to 0; 1, as Transformer
//                     Engine keeps for a zero amax)
//   amax not finite:  q = 0, scale = NaN: the row dequantizes to NaN, so trouble upstream stays
//                     visible (never silently zeroed)
// Dequantized: x~[r, c] = q[r, c] * scale[r] (one fp32 multiply).
//
// Dimension letters: R rows, C columns; M, N, K the GEMM's (out rows, out cols, inner).
#pragma once
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// x (R, C) f32/bf16/f16 -> q (R, C) i8 or f8_e4m3, scale (R) f32. x's rows may be strided.
void quantize_rows(const Tensor& x, Tensor& q, Tensor& scale);

// q (R, C) i8 or f8_e4m3, scale (R) f32 -> out (R, C) f32/bf16/f16: q * scale, rounded once.
void dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out);

// The lookup of a quantized table: out[r, :] = q[ids[r], :] * scale[ids[r]]. q (V, C) i8 or
// f8_e4m3, scale (V) f32, ids (any shape) i32 in [0, V) (ArgumentError naming the id and its
// position otherwise), out (R, C) or ids' shape followed by C, f32/bf16/f16.
void embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out);

// The exact integer GEMM: acc (M, N) i32 = a (M, K) i8 @ b (N, K)^T i8, both row-major. Every
// result is exact (|acc| <= K * 2^14 must fit int32: K <= 131072, ArgumentError otherwise).
// Where the CPU has integer dot-product units that accumulate in 32 bits (AVX512-VNNI, AVX-VNNI,
// AMX-INT8) oneDNN's s8 matmul runs; elsewhere oneDNN's int8 kernels add pairs of u8*s8 products
// in saturating 16-bit lanes (VPMADDUBSW) and are not exact, so the operands go through the fp32
// GEMM in K blocks of 1024, which is exact (every partial sum is an integer of magnitude at most
// 1024 * 2^14 = 2^24), each block's result added in int32. gemm_s8_route() names the route.
void gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc);
const char* gemm_s8_route();

// The GEMM's epilogue: out[m, n] = fma(float(acc[m, n]) * row_scale[m], col_scale[n], bias[n])
// (bias 0 when absent). acc (M, N) i32 (gemm_s8) or f32 (an E4M3 GEMM run on bf16 units),
// row_scale (M) f32, col_scale (N) f32, bias (N) f32 or null, out (M, N) f32/bf16/f16.
void dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale, const Tensor* bias,
                     Tensor& out);

// The int8 GEMM and its epilogue as one op: out = dequantize_gemm(gemm_s8(a, b)) in value, i.e.
// row_scale[m] * col_scale[n] * (a @ b^T)[m, n] + bias[n]; a (M, K) i8, b (N, K) i8 row-major,
// out (M, N) f32/bf16/f16. The reference is the two ops above (bit for bit their definitions).
// Where oneDNN's s8 matmul runs, the scaling is its epilogue and the int32 accumulators never
// reach memory: the same exact integer sums, scaled in another order, (float(acc) * col_scale)
// * row_scale + bias, within a few fp32 ulps of the definition before out's rounding (so within
// one ulp of out's dtype where that rounding lands elsewhere). Elsewhere it is the two ops.
// gelu_erf: then GELU (erf form) on the result: the reference applies activation() to out (the
// linear's rounded output, as an unfused model does); oneDNN's epilogue applies its gelu_erf to
// the fp32 value before the one rounding to out (its erf within ~1e-7 of the exact one), so the
// two differ by up to an ulp of out's dtype and that erf error.
void gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale, const Tensor& col_scale,
                         const Tensor* bias, Tensor& out, bool gelu_erf = false);

namespace ref {
void quantize_rows(const Tensor& x, Tensor& q, Tensor& scale);
void dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out);
void embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out);
void gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc);
void dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale, const Tensor* bias,
                     Tensor& out);
void gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale, const Tensor& col_scale,
                         const Tensor* bias, Tensor& out, bool gelu_erf = false);
}  // namespace ref

}  // namespace mixtrain
