// The CPU backend's implementation of every kernel op (kernels/op.h): fast kernels (oneDNN GEMM,
// OpenMP + SIMD elementwise, normalisation, reductions), each falling back to the op's scalar
// reference (ref/) where it does not apply, and whenever force_reference() is on. The bodies
// live in one file per op family (gemm_onednn.cpp, elementwise_cpu.cpp, ...).
#pragma once
#include <vector>

#include "kernels/gradient_kernels.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/kernels/quantize.h"

namespace mixtrain {

// What cpu::gemm allocates for these arguments (its per-thread scratch buffers, grown and
// trimmed as a real call would), without computing: the meta backend's GEMM. The buffers are
// the meta device's own when the operands are meta tensors.
void gemm_workspace_only(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt,
                         const Tensor* bias);
// The same for cpu::gemm_s8 (its fp32 route's operand copies and the fp32 GEMM's buffers).
void gemm_s8_workspace_only(const Tensor& a, const Tensor& b, Tensor& acc);
// ... and for cpu::gemm_s8_dequantized (oneDNN's scratchpad, or the int32 accumulators and gemm_s8's).
void gemm_s8_dequantized_workspace_only(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                                        const Tensor& col_scale, const Tensor* bias, Tensor& out,
                                        bool gelu_erf);
// Whether cpu::gemm_s8_dequantized runs (m, k) x (n, k) into out_dtype as one oneDNN primitive
// with the epilogue (and the GELU) inside (false: gemm_s8, dequantize_gemm, activation composed).
bool gemm_s8_epilogue_fused(DType out_dtype, int64_t m, int64_t n, int64_t k, bool gelu_erf = false);

namespace cpu {
namespace tiles {
struct Kernels;
}
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias);
// How bf16 GEMMs run (gemm_onednn.cpp): automatic (the measured rule: through the fp32 kernel on
// Intel with AVX512-BF16 and no AMX, else oneDNN's bf16 kernel; MIXTRAIN_BF16_GEMM=native|fp32
// overrides it), or forced either way (tests check both routes on one machine).
enum class Bf16GemmRoute { automatic, native, via_f32 };
void set_bf16_gemm_route(Bf16GemmRoute r);
// How fp16 GEMMs run (gemm_onednn.cpp): automatic (oneDNN's fp16 kernel on AVX512-FP16, else
// through the fp32 kernel; MIXTRAIN_F16_GEMM=native|fp32|bf16x4 overrides it: bf16x4 splits the
// inputs into bf16 hi + lo parts for the bf16 kernel, exact), or forced (tests check every route).
enum class F16GemmRoute { automatic, native, via_f32, bf16x4 };
void set_f16_gemm_route(F16GemmRoute r);
// How int8 GEMMs run (gemm_onednn.cpp): automatic (oneDNN's s8 matmul where the CPU has VNNI or
// AMX-INT8, else the exact fp32 route; MIXTRAIN_S8_GEMM=onednn|fp32 overrides it), or forced.
enum class S8GemmRoute { automatic, onednn, via_f32 };
void set_s8_gemm_route(S8GemmRoute r);
// fp8_cpu.cpp
void fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                     Fp8ErrorStats& s);
void fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q, Tensor& scale_inv,
                  Tensor& amax);
// quantize_cpu.cpp, gemm_onednn.cpp (gemm_s8)
void quantize_rows(const Tensor& x, Tensor& q, Tensor& scale);
void dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out);
void embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out);
void gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc);
void dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale, const Tensor* bias,
                     Tensor& out);
void gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale, const Tensor& col_scale,
                         const Tensor* bias, Tensor& out, bool gelu_erf);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void mul(const Tensor& a, const Tensor& b, Tensor& out);
void scale(const Tensor& a, float s, Tensor& out);
void gelu(const Tensor& x, Tensor& out);
void activation(Activation kind, const Tensor& x, Tensor& out);
double reduce(const Tensor& x, ReduceOp op);
void reduce_last(const Tensor& x, ReduceOp op, Tensor& out);
void sum_to_row(const Tensor& x, Tensor& out);
void argmax_last(const Tensor& x, Tensor& out);
void softmax_last(const Tensor& x, Tensor& out);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                Tensor* mean, Tensor* rstd, Tensor* xhat);
void embedding(const Tensor& weight, const Tensor& ids, Tensor& out);
double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses);

// backward_cpu.cpp
void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx);
void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx);
void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y);
void causal_softmax(const Tensor& x, float scale, Tensor& y);
void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx);
void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias);
void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits);
void sum_to_row_accumulate(const Tensor& x, Tensor& out);
void add_inplace(Tensor& acc, const Tensor& x);

// adamw_cpu.cpp, sgd_cpu.cpp
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                  const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                  const WorkingCopyOut& working);
void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working);

// gradient_cpu.cpp
UnscaleResult unscale_and_check(Tensor& g, float inv_scale);
double global_norm(const Tensor& g);

// attention_cpu.cpp
void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads);
void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out);
void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y);
void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv);
// The fused attention's workspace (f32) for q (n, T, D) or (B, H, T, D): one row of scratch per
// thread, the thread's buffers.
Tensor attention_fused_workspace(const Tensor& q, bool backward);
// The same with a given tile kernel set (amx_tiles.h): tests run the blocked algorithm with the
// scalar tiles on any CPU and with AMX's where it has them.
void attention_fused_forward_with(const tiles::Kernels& tk, const Tensor& q, const Tensor& k, const Tensor& v,
                                  float scale, Tensor& probs, Tensor& y);
void attention_fused_backward_with(const tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& probs, const Tensor& g, float scale,
                                   Tensor& dq, Tensor& dk, Tensor& dv);

// attention_masked_cpu.cpp: the fused encoder attention, its workspace (f32, a row per thread) for
// q (n, T, D), and the same with a given tile kernel set.
void masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    float scale, float p, uint64_t seed, uint64_t offset, Tensor& y);
void masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& key_mask, const Tensor& g, float scale, float p,
                                     uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv);
Tensor masked_attention_fused_workspace(const Tensor& q, bool backward);
void masked_attention_fused_forward_with(const tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& key_mask, float scale, float p,
                                         uint64_t seed, uint64_t offset, Tensor& y);
void masked_attention_fused_backward_with(const tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& key_mask, const Tensor& g,
                                          float scale, float p, uint64_t seed, uint64_t offset, Tensor& dq,
                                          Tensor& dk, Tensor& dv);
}  // namespace cpu

}  // namespace mixtrain
