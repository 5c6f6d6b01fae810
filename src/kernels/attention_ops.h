// Blocked causal attention as kernel-level operations (src/kernels/attention_ops.cpp), composed
// of the GEMM and causal-softmax ops, so every backend that has those runs it; the autograd
// attention ops (autograd/functions.h) and their backward rules call these. Also the row <-> head
// copy of q, k, v (ops::heads_copy) and the dropout mask (ops::dropout_mask).
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// The attention op works on blocks of query rows: block i holds rows [i*Tb, min(T, (i+1)*Tb)) and,
// being causal, only keys [0, r1) of them (r1 = its end row), so the masked upper triangle beyond
// each block is never computed nor stored (about 40% of the T x T work at T = 256). Blocks of 64
// rows, except where the GEMMs run on AMX (bf16, and fp32 at matmul precision medium) up to
// T = 256: there one block of all T rows (attention_ops.cpp says why). MIXTRAIN_ATTENTION_BLOCK=N
// sets the block for every dtype (N >= 1).
int64_t attention_query_block(int64_t T, DType dtype);
// Heads per chunk, so that the f32 scores (or their gradient) of one chunk of one query block
// exist at a time: about 4 MiB of them, at least one head.
int64_t attention_heads_per_chunk(int64_t T, int64_t Tb);
// Empty probability blocks for n heads of length T (block i: (n, r1 - r0, r1)).
std::vector<Tensor> attention_prob_blocks(int64_t n, int64_t T, DType dtype);
// Every head of q, k, v (BH, T, D), a chunk of heads at a time. Forward writes the probability
// blocks and y; backward, given g = dL/dy, writes dq, dk, dv (an undefined one is not computed;
// dq and dk come together). With probs empty nothing of size T x T is kept (FlashAttention's
// trade): forward makes each block's probabilities in a workspace, backward makes them again from
// q and k (the same GEMM and softmax: the same bits, so the same gradients as with kept blocks) at
// the cost of one more q k^T product and softmax per block.
void attention_heads_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             const std::vector<Tensor>& probs, Tensor& y);
void attention_heads_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::vector<Tensor>& probs, const Tensor& g, float scale,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv);
// The fused causal attention: every head of q, k, v (n, T, D) contiguous bf16 in one op, each
// head in blocks of 32 query rows on the bf16 matrix unit (AMX), the scores and their gradient
// never leaving a per-thread workspace (cpu/attention_fused_cpu.cpp says how). probs is the one
// probability block (n, T, T) of q's dtype (row i holds P[i, 0:i] and zeros), saved by forward
// for backward; backward as attention_heads_backward (dq and dk come together, either may be
// undefined with dv defined). Same values as the composed op up to the order of fp32 sums.
// f32 operands are multiplied as matmul precision medium multiplies them: every GEMM input
// (q, k, v, P, dy, dS) rounded to bf16, fp32 sums; S, P, dP and the outputs stay f32.
// attention_fused_applies says when attention_heads_forward/backward take it: q bf16 (or f32
// under --matmul-precision medium where that runs on the matrix unit), T and D multiples of 32,
// one query block (attention_query_block(T) == T), contiguous operands, AMX usable here, and
// MIXTRAIN_ATTENTION_FUSED not 0.
bool attention_fused_applies(const Tensor& q, const std::vector<Tensor>& probs);
void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y);
void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv);

// The encoder's attention (bidirectional, a key padding mask, dropout on the probabilities) with
// nothing of size T x T kept for backward: a chunk of batch rows at a time (about 4 MiB of scores),
//   forward   S = q k^T;  P = masked_softmax(scale * S, key_mask);  Pd = dropout(P);  y = Pd v
//   backward  S, P, Pd recomputed per chunk (the dropout mask regenerated from seed and offset);
//             dv = Pd^T dy;  dPd = dy v^T;  dP = dropout(dPd);  dS = scale * softmax'(P, dP);
//             dq = dS k;  dk = dS^T q
// q, k, v, y, dy (and dq, dk, dv): (B*H, T, D) contiguous, one float dtype, which S, P and Pd also
// take (the 16-bit compute dtype under autocast, as the unfused ops store them); key_mask (B, T)
// i32. p = 0: no dropout. Dropout element i of P (row-major over (B*H, T, T)) draws
// counter_rng(seed, offset + i), as dropout_mask on the whole P would. The same GEMM, softmax and
// dropout kernels as the unfused composition, on row chunks of the same operands.
void masked_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                              float scale, float p, uint64_t seed, uint64_t offset, Tensor& y);
void masked_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                               const Tensor& g, float scale, float p, uint64_t seed, uint64_t offset,
                               Tensor& dq, Tensor& dk, Tensor& dv);
// The fused encoder attention (cpu/attention_masked_cpu.cpp): the same operands, every head in one
// op on the bf16 matrix unit, blocks of 32 query rows, the scores, probabilities and their gradients
// in a per-thread workspace (nothing T x T in memory), the dropout mask drawn once per direction:
//   forward   S = q k^T (f32);  P = masked_softmax(scale S) (f32);  Pd = bf16(P f);  y = Pd v
//   backward  dP = (dy v^T) f (f32);  dS = bf16(scale P (dP - rowsum(P dP)));  dq = dS k;
//             dk = dS^T q;  dv = Pd^T dy  (f32 sums, each output rounded once)
// f[i] = dropout_mask's factor of element i of P (1/(1-p) or 0; 1 for p = 0). So the composed op's
// values up to where each rounds (it stores S and P in q's dtype) and the order of fp32 sums. f32
// operands are multiplied as matmul precision medium multiplies them (each GEMM input rounded to
// bf16). masked_attention_fused_applies says when masked_attention_forward/backward take it: q bf16
// (or f32 under --matmul-precision medium where that runs on the matrix unit), D a multiple of 32
// up to 256 (T any: padded to whole blocks inside), AMX usable, MIXTRAIN_ATTENTION_FUSED not 0.
bool masked_attention_fused_applies(const Tensor& q);
void masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    float scale, float p, uint64_t seed, uint64_t offset, Tensor& y);
void masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& key_mask, const Tensor& g, float scale, float p,
                                     uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv);
// rows (B, T, n*C) contiguous <-> the n contiguous tensors heads (B*H, T, D) (q, k, v side by side
// for n = 3, one tensor for n = 1), copied in the direction to_heads says.
void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads);
// out = x * mask / (1 - p) (fp32 math; double for f64), mask[i] = counter_rng(seed, offset + i)
// >= p * 2^32 (dropout_threshold) over x's elements in row-major order; out has x's shape (any
// float dtype).
void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out);
// The keep test's bound: element i is kept iff its 32 random bits are >= p * 2^32 (every dropout
// of the project: dropout_mask, the fused encoder attention, their references).
inline uint64_t dropout_threshold(float p) {
  return static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
}

namespace ref {
// The scalar references of heads_copy and dropout_mask (same contracts).
void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads);
void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out);
// The fused attention's: the definition in plain loops (sums in double, no tensor allocated), the
// roundings where the fused op has them (S and dP f32, P in q's dtype, dS bf16, each GEMM input as
// the GEMMs take it (f32 rounded to bf16), y, dq, dk, dv rounded once).
void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y);
void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv);
// The fused encoder attention's (plain loops, sums in double; S, P, dP f32, Pd and dS bf16, each GEMM
// input as the GEMMs take it, the outputs rounded once).
void masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    float scale, float p, uint64_t seed, uint64_t offset, Tensor& y);
void masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& key_mask, const Tensor& g, float scale, float p,
                                     uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace ref

}  // namespace mixtrain
