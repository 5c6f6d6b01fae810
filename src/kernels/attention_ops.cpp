// The blocked causal attention (kernels/attention_ops.h), shared by the autograd attention ops
// and their backward rules, and the dispatch of heads_copy and dropout_mask to the backend. Query rows go in
// blocks of Tb; block i, rows [r0, r1), sees only the keys [0, r1), so the masked upper triangle beyond each
// block is neither computed nor stored:
//   forward   S_i = q[r0:r1] k[0:r1]^T (f32 workspace);  P_i = causal_softmax(scale * S_i) (saved);
//             y[r0:r1] = P_i v[0:r1]
//   backward  dv[0:r1] += P_i^T dy[r0:r1];  dP_i = dy[r0:r1] v[0:r1]^T (f32);  dS_i = softmax bwd;
//             dq[r0:r1] = dS_i k[0:r1];     dk[0:r1] += dS_i^T q[r0:r1]
// dk and dv gather the blocks' contributions in the accumulation dtype (f32: the output itself
// when it is f32, else a workspace rounded once at the end). Going backwards over the blocks, the
// last one (which spans every key) initialises them.
#include "kernels/attention_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ops_backward.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const std::vector<Tensor>&, int64_t, bool)> heads_copy{
    "heads_copy", ref::heads_copy, cpu::heads_copy, meta::heads_copy};
const Op<void(const Tensor&, float, uint64_t, uint64_t, Tensor&)> dropout_mask{
    "dropout_mask", ref::dropout_mask, cpu::dropout_mask, meta::dropout_mask};
const Op<void(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&)> attention_fused_forward{
    "attention_fused_forward", ref::attention_fused_forward, cpu::attention_fused_forward,
    meta::attention_fused_forward};
const Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, Tensor&,
              Tensor&, Tensor&)>
    attention_fused_backward{"attention_fused_backward", ref::attention_fused_backward,
                             cpu::attention_fused_backward, meta::attention_fused_backward};
const Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, float, uint64_t, uint64_t,
              Tensor&)>
    masked_attention_fused_forward{"masked_attention_fused_forward", ref::masked_attention_fused_forward,
                                   cpu::masked_attention_fused_forward, meta::masked_attention_fused_forward};
const Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, float,
              uint64_t, uint64_t, Tensor&, Tensor&, Tensor&)>
    masked_attention_fused_backward{"masked_attention_fused_backward", ref::masked_attention_fused_backward,
                                    cpu::masked_attention_fused_backward,
                                    meta::masked_attention_fused_backward};
}  // namespace ops

// Blocks of query rows make every GEMM operand but the first block's a strided slice (the rows
// [r0, r1) or keys [0, r1) of each head), and oneDNN 3.2's AMX matmul takes no strided batch: it
// runs those on its AVX-512 gemm:jit:bf16 kernel instead, which was 80% of the attention op's time
// on a Xeon with AMX (gpt-mini, bf16-mixed). One block of all T rows keeps every operand dense,
// so AMX runs them although they compute the masked triangle too (q k^T for 64 heads at T = 256:
// 0.48 ms dense against 0.65 ms for the four strided blocks). Past T = 256 the wasted half and the
// T x T probabilities grow with T, so longer sequences keep the blocks. fp32 GEMMs on the AVX-512
// FMA kernel gain nothing from one block (gpt-mini 32-true: attention 199 ms a step with the
// blocks, 213 without), so fp32 keeps them unless its products run on AMX (matmul precision
// medium: 6,543 -> 7,035 tokens/s).
int64_t attention_query_block(int64_t T, DType dtype) {
  static const int64_t forced = [] {
    const char* v = std::getenv("MIXTRAIN_ATTENTION_BLOCK");
    return v ? std::max<int64_t>(0, std::atoll(v)) : int64_t{0};
  }();
  if (forced > 0) return std::min<int64_t>(T, forced);
  static const bool bf16_on_amx = gemm_impl_name(DType::bf16).find("amx") != std::string::npos;
  // fp32 under --matmul-precision medium runs bf16 products on AMX too (where the route says so).
  const bool on_amx =
      bf16_on_amx && (dtype == DType::bf16 ||
                      (dtype == DType::f32 && matmul_precision_uses_bf16(float32_matmul_precision())));
  if (on_amx && T <= 256) return T;
  return std::min<int64_t>(T, 64);
}

int64_t attention_heads_per_chunk(int64_t T, int64_t Tb) {
  return std::max<int64_t>(1, (int64_t{4} << 20) / (Tb * T * 4));
}

namespace {
struct Block {
  int64_t r0, r1;
};
std::vector<Block> blocks_of(int64_t T, DType dtype) {
  const int64_t Tb = attention_query_block(T, dtype);
  std::vector<Block> b;
  for (int64_t r0 = 0; r0 < T; r0 += Tb) b.push_back({r0, std::min(T, r0 + Tb)});
  return b;
}
DType accumulation_dtype(DType t) {
  return t == DType::f64 ? DType::f64 : DType::f32;
}  // f64: gradient checks
}  // namespace

std::vector<Tensor> attention_prob_blocks(int64_t n, int64_t T, DType dtype) {
  std::vector<Tensor> probs;
  for (const Block& b : blocks_of(T, dtype)) probs.push_back(Tensor::empty({n, b.r1 - b.r0, b.r1}, dtype));
  return probs;
}

namespace {
// The heads [h0, h1) of the probability blocks.
std::vector<Tensor> attention_prob_slices(const std::vector<Tensor>& probs, int64_t h0, int64_t h1) {
  std::vector<Tensor> s;
  for (const Tensor& p : probs) s.push_back(p.slice(0, h0, h1));
  return s;
}

// Block b's probabilities: P = causal_softmax(scale * q[r0:r1] k[0:r1]^T) into p (h, r1 - r0, r1),
// row j of the block seeing keys [0, r0 + j]. Forward and the recomputing backward both call it:
// the same GEMM on the same operands and the same softmax, so the same bits.
void block_probabilities(const Tensor& q, const Tensor& k, const Block& b, float scale, Tensor& p) {
  const Tensor s = matmul(q.slice(1, b.r0, b.r1), k.slice(1, 0, b.r1), false, true,
                          accumulation_dtype(q.dtype()), MemCategory::workspace);
  causal_softmax(s, scale, p);
}

// A block's probability tensor: the saved one, or (probs empty: nothing kept) a workspace.
Tensor block_probs_or_workspace(const std::vector<Tensor>& probs, size_t i, int64_t h, const Block& b,
                                DType dtype) {
  return probs.empty() ? Tensor::empty({h, b.r1 - b.r0, b.r1}, dtype, MemCategory::workspace) : probs[i];
}

// One chunk of h heads: q, k, v, y (h, T, D) views (rows contiguous, any row and batch strides),
// probs the chunk's blocks (empty: none kept). Forward writes probs and y; backward, given g =
// dL/dy, writes dq, dk, dv ((h, T, D) views; an undefined one is not computed, dq and dk come
// together), computing each block's probabilities again when probs is empty.
void attention_chunk_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             const std::vector<Tensor>& probs, Tensor& y) {
  const std::vector<Block> blocks = blocks_of(q.size(1), q.dtype());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto [r0, r1] = blocks[i];
    Tensor p = block_probs_or_workspace(probs, i, q.size(0), blocks[i], q.dtype());  // (h, r1 - r0, r1)
    block_probabilities(q, k, blocks[i], scale, p);
    Tensor y_rows = y.slice(1, r0, r1);
    gemm(p, v.slice(1, 0, r1), y_rows);
  }
}

void attention_chunk_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::vector<Tensor>& probs, const Tensor& g, float scale, Tensor dq,
                              Tensor dk, Tensor dv) {
  const DType acc = accumulation_dtype(q.dtype());
  const int64_t h = q.size(0), T = q.size(1), D = q.size(2);
  const std::vector<Block> blocks = blocks_of(T, q.dtype());
  const bool need_qk = dq.defined(), need_v = dv.defined();
  const auto accumulator = [&](const Tensor& out) {
    return !out.defined() || out.dtype() == acc ? out : Tensor::empty({h, T, D}, acc, MemCategory::workspace);
  };
  Tensor dk_acc = accumulator(dk), dv_acc = accumulator(dv);
  for (size_t n = blocks.size(); n-- > 0;) {
    const auto [r0, r1] = blocks[n];
    Tensor p = block_probs_or_workspace(probs, n, h, blocks[n], q.dtype());
    if (probs.empty()) block_probabilities(q, k, blocks[n], scale, p);  // as forward made them
    const Tensor gi = g.slice(1, r0, r1);
    GemmOptions ta;
    ta.trans_a = true;
    ta.beta = n + 1 == blocks.size() ? 0.f : 1.f;
    if (need_v) {
      Tensor dv_keys = dv_acc.slice(1, 0, r1);
      gemm(p, gi, dv_keys, ta);  // dv[0:r1] += P_i^T dy[r0:r1]
    }
    if (!need_qk) continue;
    Tensor ds = Tensor::empty(p.shape(), p.dtype(), MemCategory::workspace);  // (h, r1 - r0, r1)
    {
      const Tensor dp = matmul(gi, v.slice(1, 0, r1), false, true, acc, MemCategory::workspace);
      causal_softmax_backward(p, dp, scale, ds);
    }
    Tensor dq_rows = dq.slice(1, r0, r1), dk_keys = dk_acc.slice(1, 0, r1);
    gemm(ds, k.slice(1, 0, r1), dq_rows);       // dq[r0:r1] = dS_i k[0:r1]
    gemm(ds, q.slice(1, r0, r1), dk_keys, ta);  // dk[0:r1] += dS_i^T q[r0:r1]
  }
  if (need_v && dv_acc.dtype() != dv.dtype()) dv.copy_from(dv_acc);
  if (need_qk && dk_acc.dtype() != dk.dtype()) dk.copy_from(dk_acc);
}
}  // namespace

// On the meta device (a memory prediction) the chunks are alike and free their temporaries before
// the next, so the first alone gives the peak: the prediction's cost does not grow with the batch.
namespace {
int64_t chunked_end(const Tensor& q, int64_t n, int64_t chunk) {
  return q.is_meta() ? std::min(n, chunk) : n;
}

// What both fused attentions (causal and masked) need: AMX usable, MIXTRAIN_ATTENTION_FUSED not 0,
// and q bf16, or f32 where its products are bf16 anyway (matmul precision medium on the matrix unit).
bool fused_attention_takes(DType t) {
  static const bool enabled = [] {
    const char* v = std::getenv("MIXTRAIN_ATTENTION_FUSED");
    return !(v && std::string(v) == "0") && cpu::tiles::amx_usable();
  }();
  return enabled &&
         (t == DType::bf16 || (t == DType::f32 && matmul_precision_uses_bf16(float32_matmul_precision())));
}
}  // namespace

// The fused op where it applies (attention_ops.h). On AMX it replaces oneDNN calls per chunk of
// heads (their f32 scores through memory, a parallel region per softmax) with one pass per head
// in L2: gpt-mini bf16-mixed on a Xeon with AMX, bench/RESULTS.md has the measurement.
bool attention_fused_applies(const Tensor& q, const std::vector<Tensor>& probs) {
  if (!fused_attention_takes(q.dtype()) || (q.dim() != 3 && q.dim() != 4) || probs.size() != 1) return false;
  const int64_t T = q.size(-2), D = q.size(-1);
  return T % 32 == 0 && D % 32 == 0 && D <= 256 && probs[0].size(2) == T && q.stride(-1) == 1 &&
         probs[0].is_contiguous();
}

void attention_heads_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             const std::vector<Tensor>& probs, Tensor& y) {
  if (attention_fused_applies(q, probs) && k.is_contiguous() && v.is_contiguous() && y.is_contiguous()) {
    Tensor p = probs[0];
    return attention_fused_forward(q, k, v, scale, p, y);
  }
  const int64_t BH = q.size(0), T = q.size(1);
  const int64_t chunk = attention_heads_per_chunk(T, attention_query_block(T, q.dtype()));
  for (int64_t h0 = 0; h0 < chunked_end(q, BH, chunk); h0 += chunk) {
    const int64_t h1 = std::min(BH, h0 + chunk);
    Tensor yc = y.slice(0, h0, h1);
    attention_chunk_forward(q.slice(0, h0, h1), k.slice(0, h0, h1), v.slice(0, h0, h1), scale,
                            attention_prob_slices(probs, h0, h1), yc);
  }
}

void attention_heads_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::vector<Tensor>& probs, const Tensor& g, float scale,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const auto dense = [](const Tensor& t) { return !t.defined() || t.is_contiguous(); };
  if (attention_fused_applies(q, probs) && k.is_contiguous() && v.is_contiguous() && g.is_contiguous() &&
      dense(dq) && dense(dk) && dense(dv)) {
    Tensor dq_ = dq, dk_ = dk, dv_ = dv;
    return attention_fused_backward(q, k, v, probs[0], g, scale, dq_, dk_, dv_);
  }
  const int64_t BH = q.size(0), T = q.size(1);
  const int64_t chunk = attention_heads_per_chunk(T, attention_query_block(T, q.dtype()));
  const auto part = [](const Tensor& t, int64_t h0, int64_t h1) {
    return t.defined() ? t.slice(0, h0, h1) : Tensor();
  };
  for (int64_t h0 = 0; h0 < chunked_end(q, BH, chunk); h0 += chunk) {
    const int64_t h1 = std::min(BH, h0 + chunk);
    attention_chunk_backward(q.slice(0, h0, h1), k.slice(0, h0, h1), v.slice(0, h0, h1),
                             attention_prob_slices(probs, h0, h1), g.slice(0, h0, h1), scale,
                             part(dq, h0, h1), part(dk, h0, h1), part(dv, h0, h1));
  }
}

namespace {
// Batch rows per chunk of the masked attention: about 4 MiB of f32 scores, at least one row.
int64_t masked_attention_rows_per_chunk(int64_t H, int64_t T) {
  return std::max<int64_t>(1, (int64_t{4} << 20) / (H * T * T * 4));
}

// One chunk's probabilities: S = q k^T, P = masked_softmax(scale * S), Pd = dropout(P) (P itself
// when p = 0). Returns Pd and, in `probs`, P. The heads [h0, h1) of the whole (B*H, T, T).
Tensor chunk_probabilities(const Tensor& qc, const Tensor& kc, const Tensor& mask_c, float scale, float p,
                           uint64_t seed, uint64_t first, Tensor& probs) {
  const DType t = qc.dtype();
  {
    const Tensor s = matmul(qc, kc, false, true, t, MemCategory::workspace);  // (n, T, T)
    probs = Tensor::empty(s.shape(), t, MemCategory::workspace);
    masked_softmax(s, mask_c, scale, probs);
  }
  if (p == 0.f) return probs;
  Tensor pd = Tensor::empty(probs.shape(), t, MemCategory::workspace);
  dropout_mask(probs, p, seed, first, pd);
  return pd;
}

void check_masked_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                            float p) {
  if (q.dim() != 3 || !(k.shape() == q.shape()) || !(v.shape() == q.shape()) || !q.is_contiguous() ||
      !k.is_contiguous() || !v.is_contiguous())
    throw ShapeError("masked_attention: q " + q.to_string() + ", k " + k.to_string() + ", v " +
                     v.to_string() + " must be contiguous (B*H, T, D) of one shape");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw DTypeError("masked_attention: q, k and v must share one dtype");
  if (key_mask.dim() != 2 || key_mask.dtype() != DType::i32 || key_mask.size(1) != q.size(1) ||
      key_mask.size(0) < 1 || q.size(0) % key_mask.size(0) != 0)
    throw ShapeError("masked_attention: key_mask " + key_mask.to_string() +
                     " must be i32 (B, T) with B dividing " + std::to_string(q.size(0)) +
                     " heads and T = " + std::to_string(q.size(1)));
  if (!(p >= 0.f && p < 1.f))
    throw ArgumentError("masked_attention: dropout p must be in [0, 1), got " + std::to_string(p));
}
// The fused op's operands: q bf16 or f32, (n, T, D) or (B, H, T, D) with unit stride in D, D a
// multiple of 32 up to 256; k and v of q's shape, dtype and strides; the key mask i32 (B, T)
// contiguous with B dividing the heads; the outputs (y, or dq, dk, dv with one another's strides)
// and dy of q's shape and dtype with unit stride in D.
void check_masked_fused(const char* op, const Tensor& q, const std::vector<const Tensor*>& alike,
                        const std::vector<const Tensor*>& outs, const Tensor& key_mask, float p) {
  const bool rank = q.dim() == 3 || q.dim() == 4;
  const int64_t T = rank ? q.size(-2) : 0, D = rank ? q.size(-1) : 0;
  const int64_t heads = q.dim() == 4 ? q.size(0) * q.size(1) : rank ? q.size(0) : 0;
  bool ok = rank && (q.dtype() == DType::bf16 || q.dtype() == DType::f32) && q.stride(-1) == 1 && T > 0 &&
            D % 32 == 0 && D > 0 && D <= 256;
  const auto like = [&](const Tensor& t) {
    return t.defined() && t.shape() == q.shape() && t.dtype() == q.dtype() && t.stride(-1) == 1 &&
           t.device() == q.device();
  };
  for (const std::vector<const Tensor*>* group : {&alike, &outs})
    for (const Tensor* t : *group) ok = ok && like(*t) && t->strides() == group->front()->strides();
  if (!ok)
    throw ShapeError(
        std::string(op) + ": q " + q.to_string() +
        " must be bf16 or f32 (n, T, D) or (B, H, T, D) with unit stride in D, D a multiple of 32 "
        "up to 256; k and v of q's shape and strides, every output (and dy) of q's shape and dtype "
        "with unit stride in D");
  if (key_mask.dim() != 2 || key_mask.dtype() != DType::i32 || !key_mask.is_contiguous() ||
      key_mask.size(1) != T || key_mask.size(0) < 1 || heads % key_mask.size(0) != 0)
    throw ShapeError(std::string(op) + ": key_mask " + key_mask.to_string() +
                     " must be contiguous i32 (B, T) with B dividing " + std::to_string(heads) +
                     " heads and T = " + std::to_string(T));
  if (!(p >= 0.f && p < 1.f))
    throw ArgumentError(std::string(op) + ": dropout p must be in [0, 1), got " + std::to_string(p));
}
}  // namespace

// The fused op where it applies (attention_ops.h): on AMX it replaces the composed op's oneDNN
// calls per chunk, its S, P, Pd and dP tensors through memory and its three dropout passes.
bool masked_attention_fused_applies(const Tensor& q) {
  return fused_attention_takes(q.dtype()) && (q.dim() == 3 || q.dim() == 4) && q.size(-2) > 0 &&
         q.size(-1) % 32 == 0 && q.size(-1) <= 256 && q.stride(-1) == 1;
}

void masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    float scale, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  check_masked_fused("masked_attention_fused_forward", q, {&q, &k, &v}, {&y}, key_mask, p);
  ops::masked_attention_fused_forward(q.device(), q, k, v, key_mask, scale, p, seed, offset, y);
}

void masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& key_mask, const Tensor& g, float scale, float p,
                                     uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) {
  check_masked_fused("masked_attention_fused_backward", q, {&q, &k, &v}, {&g}, key_mask, p);
  check_masked_fused("masked_attention_fused_backward", q, {&q}, {&dq, &dk, &dv}, key_mask, p);
  ops::masked_attention_fused_backward(q.device(), q, k, v, key_mask, g, scale, p, seed, offset, dq, dk, dv);
}

void masked_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                              float scale, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  check_masked_attention(q, k, v, key_mask, p);
  if (masked_attention_fused_applies(q) && key_mask.is_contiguous() && y.is_contiguous())
    return masked_attention_fused_forward(q, k, v, key_mask, scale, p, seed, offset, y);
  const int64_t B = key_mask.size(0), H = q.size(0) / B, T = q.size(1);
  const int64_t rows = masked_attention_rows_per_chunk(H, T);
  for (int64_t b0 = 0; b0 < chunked_end(q, B, rows); b0 += rows) {
    const int64_t b1 = std::min(B, b0 + rows), h0 = b0 * H, h1 = b1 * H;
    Tensor probs;
    const Tensor pd = chunk_probabilities(q.slice(0, h0, h1), k.slice(0, h0, h1), key_mask.slice(0, b0, b1),
                                          scale, p, seed, offset + uint64_t(h0 * T * T), probs);
    Tensor yc = y.slice(0, h0, h1);
    gemm(pd, v.slice(0, h0, h1), yc);  // y = Pd v
  }
}

void masked_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                               const Tensor& g, float scale, float p, uint64_t seed, uint64_t offset,
                               Tensor& dq, Tensor& dk, Tensor& dv) {
  check_masked_attention(q, k, v, key_mask, p);
  if (masked_attention_fused_applies(q) && key_mask.is_contiguous() && g.is_contiguous() &&
      dq.is_contiguous() && dk.is_contiguous() && dv.is_contiguous()) {
    return masked_attention_fused_backward(q, k, v, key_mask, g, scale, p, seed, offset, dq, dk, dv);
  }
  const int64_t B = key_mask.size(0), H = q.size(0) / B, T = q.size(1);
  const int64_t rows = masked_attention_rows_per_chunk(H, T);
  GemmOptions ta;
  ta.trans_a = true;
  for (int64_t b0 = 0; b0 < chunked_end(q, B, rows); b0 += rows) {
    const int64_t b1 = std::min(B, b0 + rows), h0 = b0 * H, h1 = b1 * H;
    const uint64_t first = offset + uint64_t(h0 * T * T);
    const Tensor qc = q.slice(0, h0, h1), kc = k.slice(0, h0, h1), vc = v.slice(0, h0, h1),
                 gc = g.slice(0, h0, h1);
    Tensor probs;
    const Tensor pd = chunk_probabilities(qc, kc, key_mask.slice(0, b0, b1), scale, p, seed, first, probs);
    Tensor dvc = dv.slice(0, h0, h1);
    gemm(pd, gc, dvc, ta);  // dv = Pd^T dy
    Tensor ds = Tensor::empty(probs.shape(), probs.dtype(), MemCategory::workspace);
    {
      Tensor dp = matmul(gc, vc, false, true, q.dtype(), MemCategory::workspace);  // dPd = dy v^T
      if (p != 0.f) {                                                              // dP = dropout(dPd)
        Tensor masked = Tensor::empty(dp.shape(), dp.dtype(), MemCategory::workspace);
        dropout_mask(dp, p, seed, first, masked);
        dp = masked;
      }
      softmax_last_backward(probs, dp, ds);
    }
    if (scale != 1.f) mixtrain::scale(ds, scale, ds);
    Tensor dqc = dq.slice(0, h0, h1), dkc = dk.slice(0, h0, h1);
    gemm(ds, kc, dqc);      // dq = dS k
    gemm(ds, qc, dkc, ta);  // dk = dS^T q
  }
}

namespace {
// q: (n, T, D) or (B, H, T, D), unit stride in D, T and D multiples of 32; `alike` share q's
// shape, dtype and strides (k and v with q; dq, dk and dv among themselves), `outs` q's shape and
// dtype with unit stride in D; probs contiguous (heads, T, T) of q's dtype.
void check_fused(const char* op, const Tensor& q, const std::vector<const Tensor*>& alike,
                 const std::vector<const Tensor*>& outs, const Tensor& probs) {
  const bool rank = q.dim() == 3 || q.dim() == 4;
  const int64_t T = rank ? q.size(-2) : 0, D = rank ? q.size(-1) : 0;
  const int64_t heads = q.dim() == 4 ? q.size(0) * q.size(1) : rank ? q.size(0) : 0;
  bool ok = rank && (q.dtype() == DType::bf16 || q.dtype() == DType::f32) && q.stride(-1) == 1 && T > 0 &&
            D > 0 && T % 32 == 0 && D % 32 == 0 && probs.dtype() == q.dtype() && probs.is_contiguous() &&
            probs.shape() == Shape{heads, T, T} && probs.device() == q.device();
  const auto like = [&](const Tensor& t) {
    return t.shape() == q.shape() && t.dtype() == q.dtype() && t.stride(-1) == 1 && t.device() == q.device();
  };
  const Tensor* first = nullptr;
  for (const Tensor* t : alike) {
    if (!t->defined()) continue;
    ok = ok && like(*t) && (!first || t->strides() == first->strides());
    if (!first) first = t;
  }
  for (const Tensor* t : outs) ok = ok && (!t->defined() || like(*t));
  if (!ok)
    throw ShapeError(
        std::string(op) + ": q " + q.to_string() + " and probs " + probs.to_string() +
        " must be bf16 or f32 (n, T, D) or (B, H, T, D) with unit stride in D and (heads, T, T) "
        "contiguous, T and D multiples of 32, every other operand of q's shape (k and v with q's "
        "strides, dq, dk and dv with one another's)");
}
}  // namespace

void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y) {
  if (!y.defined() || !k.defined() || !v.defined())
    throw ShapeError("attention_fused_forward: k, v and y must be defined");
  check_fused("attention_fused_forward", q, {&q, &k, &v}, {&y}, probs);
  ops::attention_fused_forward(q.device(), q, k, v, scale, probs, y);
}

void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (!k.defined() || !v.defined() || !g.defined() || dq.defined() != dk.defined() ||
      (!dq.defined() && !dv.defined()))
    throw ShapeError(
        "attention_fused_backward: k, v and g must be defined, dq and dk together, one output at least");
  check_fused("attention_fused_backward", q, {&q, &k, &v}, {&g}, probs);
  check_fused("attention_fused_backward", q, {&dq, &dk, &dv}, {}, probs);
  ops::attention_fused_backward(q.device(), q, k, v, probs, g, scale, dq, dk, dv);
}

void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) {
  if (rows.dim() != 3 || !rows.is_contiguous() || heads.empty() || H < 1 ||
      rows.size(2) % (int64_t(heads.size()) * H) != 0)
    throw ShapeError("heads_copy: rows " + rows.to_string() +
                     " must be contiguous (B, T, n*C) with n*C divisible by " + std::to_string(heads.size()) +
                     " * " + std::to_string(H) + " heads");
  const int64_t B = rows.size(0), T = rows.size(1), D = rows.size(2) / (int64_t(heads.size()) * H);
  for (const Tensor& h : heads) {
    if (!h.is_contiguous() || !(h.shape() == Shape{B * H, T, D}) || h.dtype() != rows.dtype())
      throw ShapeError("heads_copy: head tensor " + h.to_string() + " must be contiguous (" +
                       std::to_string(B * H) + ", " + std::to_string(T) + ", " + std::to_string(D) +
                       ") of the rows' dtype");
    if (!(h.device() == rows.device())) throw ArgumentError("heads_copy: rows and heads must share a device");
  }
  ops::heads_copy(rows.device(), rows, heads, H, to_heads);
}

void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
  if (!(p >= 0.f && p < 1.f))
    throw ArgumentError("dropout_mask: p must be in [0, 1), got " + std::to_string(p));
  if (!(out.shape() == x.shape()))
    throw ShapeError("dropout_mask: out " + out.to_string() + " must have x's shape " + x.to_string());
  if (!(out.device() == x.device())) throw ArgumentError("dropout_mask: x and out must share a device");
  ops::dropout_mask(x.device(), x, p, seed, offset, out);
}

}  // namespace mixtrain
