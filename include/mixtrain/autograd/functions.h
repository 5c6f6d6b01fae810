// The differentiable ops. Each runs the forward kernel (kernels/ops.h) and, when gradients are
// enabled and an input requires one, records a Node for backward. Outputs have the dtype of the
// first floating input unless stated; all math is fp32 inside the kernels. Inside an autocast
// region (amp's autocast, reached through autograd/cast_hook.h) the op's policy first casts the
// inputs (GEMM family to 16 bits, promote for add/mul) or, for layer_norm / causal_softmax /
// cross_entropy, makes the output fp32.
//
// Dimension letters: B batch, T sequence, C channels, H heads, D = C / H head size, V vocab.
#pragma once
#include <functional>

#include "mixtrain/autograd/variable.h"
#include "mixtrain/tensor/quantized.h"

namespace mixtrain::autograd {

// a (M, K) or batched (Bt, M, K); b (K, N), (Bt, K, N) or 2-D shared; transposes as gemm.
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);
// x (..., IN), w (OUT, IN) (torch nn.Linear layout), b (OUT) or undefined -> (..., OUT).
Var linear(const Var& x, const Var& w, const Var& b);
// The same with quantized weights, for inference (tensor/quantized.h; the scheme says how:
// int8-dynamic quantizes x per row and runs the exact int8 GEMM, fp8 quantizes x per row to E4M3
// and runs the GEMM on bf16 units, int8-weight dequantizes w into x's dtype and runs the float
// GEMM). x is cast as linear's autocast policy casts it (16 bits inside a region); the output has
// x's dtype then. No gradient: ArgumentError when gradients are enabled and x requires one.
// gelu_erf: GELU (erf form) of the result, as gelu_erf(quantized_linear(x, w, b)); int8-dynamic
// runs it inside the int8 GEMM's epilogue (kernels/quantize.h: gemm_s8_dequantized).
Var quantized_linear(const Var& x, const QuantizedTensor& w, const Var& b, bool gelu_erf = false);
Var add(const Var& a, const Var& b);  // b has a's shape or is a row (C) broadcast
Var mul(const Var& a, const Var& b);
Var scale(const Var& a, float s);
Var gelu(const Var& x);
Var gelu_erf(const Var& x);  // exact GELU, x Phi(x) (BERT's "gelu", torch's gelu())
Var tanh(const Var& x);
Var relu(const Var& x);
// x (..., C), weight and bias (C); eps inside the square root; biased variance (as torch).
Var layer_norm(const Var& x, const Var& weight, const Var& bias, float eps);
// weight (V, C), ids (...) i32 -> (..., C).
// padding_idx >= 0: that row gets no gradient (torch's nn.Embedding(padding_idx=...)).
Var embedding(const Var& weight, const Tensor& ids, int64_t padding_idx = -1);
// The lookup of a quantized table (V, C), dequantized into `dtype`: ids (...) -> (..., C). No gradient.
Var quantized_embedding(const QuantizedTensor& table, const Tensor& ids, DType dtype);
// x (..., Tq, Tk) -> softmax over the last dim of scale * x, row i seeing columns <= i + Tk - Tq.
Var causal_softmax(const Var& x, float scale);
// Bidirectional attention softmax: x (B*H, Tq, Tk), key_mask (B, Tk) i32 (1 real, 0 padding) ->
// softmax over the last dim of scale * x with the padded keys at probability 0 (a row with no real
// key is uniform). Under autocast it runs in the 16-bit compute dtype, as the attention op (fp32
// math and sums inside; the probabilities stored once in 16 bits, for backward and for p v).
Var masked_softmax(const Var& x, const Tensor& key_mask, float scale);
// logits (..., V), targets (...) i32 (-1 ignored) -> scalar f32 mean loss.
Var cross_entropy(const Var& logits, const Tensor& targets);
// cross_entropy(matmul(x, w, false, true), targets) without the logits ever whole (Liger Kernel's
// FusedLinearCrossEntropy, llm.c's fused classifier): x (..., C), w (V, C) (a tied embedding),
// targets (...) i32 (-1 ignored) -> the scalar f32 mean loss. Under autocast x and w in the compute
// dtype (as matmul) and the loss in fp32 inside; chunk_rows rows of logits at a time (0: about
// 8 Mi logits a chunk, 2 Mi where 16-bit GEMMs convert to fp32), made again in backward, whose gradient goes
// into dx and dw chunk by chunk. Equal to the unfused ops within the rounding of the sums (the loss summed in
// double, dw over chunks).
Var lm_head_loss(const Var& x, const Var& w, const Tensor& targets, int64_t chunk_rows = 0);
Var reshape(const Var& x, const Shape& shape);  // x must be contiguous
// qkv (B, T, 3C) -> q (which=0), k (1) or v (2) as (B*H, T, D), contiguous.
Var split_heads(const Var& qkv, int which, int64_t n_head);
// y (B*H, T, D) -> (B, T, C), contiguous.
Var merge_heads(const Var& y, int64_t batch);
// The encoder's attention in one op: dropout(masked_softmax(q k^T, key_mask, scale), p) v for q,
// k, v (B*H, T, D) and key_mask (B, T) i32, with the dropout mask of dropout(., p, seed, offset)
// (p = 0: none). Equal to that composition of the ops above, but keeps only q, k and v for
// backward, which recomputes the probabilities a chunk of batch rows at a time (and regenerates
// the mask): no T x T tensor outlives the op (kernels/attention_ops.h). Under autocast it runs in
// the 16-bit compute dtype, as masked_softmax and the matmuls do.
Var masked_attention(const Var& q, const Var& k, const Var& v, const Tensor& key_mask, float scale, float p,
                     uint64_t seed, uint64_t offset);
// The same with q, k, v read from qkv (B, T, 3C) (q, k, v side by side, head h at columns
// [h*D, (h+1)*D) of each) and the output (B, T, C) with the heads side by side: the values of
// merge_heads(masked_attention(split_heads(qkv, 0..2), ...)). Where the fused kernel applies
// (kernels/attention_ops.h masked_attention_fused_applies) it reads and writes in place (no head
// copies either way, backward writes qkv's gradient directly) and keeps qkv itself for backward;
// elsewhere it copies the heads out and keeps them, as that composition does.
Var masked_attention_qkv(const Var& qkv, const Tensor& key_mask, int64_t n_head, float scale, float p,
                         uint64_t seed, uint64_t offset);
// Inverted dropout with a counter-based mask: element i is kept iff rng(seed, offset + i) >= p.
// p == 0 (or gradients disabled and `training` false) returns x itself.
Var dropout(const Var& x, float p, uint64_t seed, uint64_t offset, bool training = true);
Var cast(const Var& x, DType dtype);
// Causal self-attention of one batch of heads: softmax(scale * q k^T) v with the causal mask.
// q, k, v: (B*H, T, D), one dtype; out: (B*H, T, D). One op instead of matmul, causal_softmax and
// matmul, so the graph keeps the probabilities once, in the compute dtype (16 bits under
// autocast, like torch's scaled_dot_product_attention, which autocast runs in lower precision),
// and never the fp32 scores: the softmax itself is fp32 math (f32 scores, f32 row sums).
// Attention probabilities: keep (kept for backward) or recompute (nothing of size T x T kept:
// backward makes them again from q and k, bit for bit the same, as FlashAttention recomputes).
enum class AttentionProbs : uint8_t { keep, recompute };
Var attention(const Var& q, const Var& k, const Var& v, float scale,
              AttentionProbs probs = AttentionProbs::keep);
// The same attention with q, k, v read in place from qkv (B, T, 3C) (the layout of GPT-2's c_attn
// output: q, k, v side by side, head h at columns [h*D, (h+1)*D) of each) and the output written
// as (B, T, C) with the heads side by side: equal to merge_heads(attention(split_heads(qkv, 0..2)))
// without the head copies in forward or the three (B, T, 3C) gradients in backward. recompute
// takes the blocked path (not the AMX fused kernel, which keeps its (B*H, T, T) probabilities).
Var attention_qkv(const Var& qkv, int64_t n_head, float scale, AttentionProbs probs = AttentionProbs::keep);
// Activation checkpointing: y = fn(x), run without recording a graph, so only x is kept; backward
// runs fn(x) again with gradients on, in the autocast state forward had, and backpropagates
// through that. fn must compute the same values each time (it may read parameters, whose
// gradients go straight to their buffers; dropout must take the same seed and offset) and
// depend on no other Var that needs a gradient. Same gradients as fn(x) itself, bit for bit.
Var checkpoint(const std::function<Var(const Var&)>& fn, const Var& x);
// y = x (the same tensor); when backward reaches y, on_backward() runs before x's gradient is
// passed on, so before the backward of every op that produced x. Without gradients: x itself.
Var backward_hook(const Var& x, std::function<void()> on_backward);

}  // namespace mixtrain::autograd
