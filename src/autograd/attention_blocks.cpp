// The blocked causal attention shared by the attention ops (functions.cpp) and their backward
// rules (backward_rules.cpp). Query rows go in blocks of Tb; block i, rows [r0, r1), sees only the
// keys [0, r1), so the masked upper triangle beyond each block is neither computed nor stored:
//   forward   S_i = q[r0:r1] k[0:r1]^T (f32 workspace);  P_i = causal_softmax(scale * S_i) (saved);
//             y[r0:r1] = P_i v[0:r1]
//   backward  dv[0:r1] += P_i^T dy[r0:r1];  dP_i = dy[r0:r1] v[0:r1]^T (f32);  dS_i = softmax bwd;
//             dq[r0:r1] = dS_i k[0:r1];     dk[0:r1] += dS_i^T q[r0:r1]
// dk and dv gather the blocks' contributions in the accumulation dtype (f32: the output itself
// when it is f32, else a workspace rounded once at the end). Going backwards over the blocks, the
// last one (which spans every key) initialises them.
#include <algorithm>
#include <cstring>

#include "internal.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/ops_backward.h"

namespace mixtrain::autograd {

int64_t attention_query_block(int64_t T) { return std::min<int64_t>(T, 64); }

int64_t attention_heads_per_chunk(int64_t T, int64_t Tb) {
  return std::max<int64_t>(1, (int64_t{4} << 20) / (Tb * T * 4));
}

namespace {
struct Block {
  int64_t r0, r1;
};
std::vector<Block> blocks_of(int64_t T) {
  const int64_t Tb = attention_query_block(T);
  std::vector<Block> b;
  for (int64_t r0 = 0; r0 < T; r0 += Tb) b.push_back({r0, std::min(T, r0 + Tb)});
  return b;
}
DType accumulation_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }  // f64: gradient checks
}  // namespace

std::vector<Tensor> attention_prob_blocks(int64_t n, int64_t T, DType dtype) {
  std::vector<Tensor> probs;
  for (const Block& b : blocks_of(T)) probs.push_back(Tensor::empty({n, b.r1 - b.r0, b.r1}, dtype));
  return probs;
}

namespace {
// The heads [h0, h1) of the probability blocks.
std::vector<Tensor> attention_prob_slices(const std::vector<Tensor>& probs, int64_t h0, int64_t h1) {
  std::vector<Tensor> s;
  for (const Tensor& p : probs) s.push_back(p.slice(0, h0, h1));
  return s;
}

// One chunk of h heads: q, k, v, y (h, T, D) views (rows contiguous, any row and batch strides),
// probs the chunk's blocks. Forward writes probs and y; backward, given g = dL/dy, writes dq, dk,
// dv ((h, T, D) views; an undefined one is not computed, dq and dk come together).
void attention_chunk_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             const std::vector<Tensor>& probs, Tensor& y) {
  const DType acc = accumulation_dtype(q.dtype());
  const std::vector<Block> blocks = blocks_of(q.size(1));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto [r0, r1] = blocks[i];
    Tensor p = probs[i];  // (h, r1 - r0, r1)
    {
      const Tensor s = matmul(q.slice(1, r0, r1), k.slice(1, 0, r1), false, true, acc, MemCategory::workspace);
      causal_softmax(s, scale, p);  // row j of the block sees keys [0, r0 + j]
    }
    Tensor y_rows = y.slice(1, r0, r1);
    gemm(p, v.slice(1, 0, r1), y_rows);
  }
}

void attention_chunk_backward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<Tensor>& probs,
                              const Tensor& g, float scale, Tensor dq, Tensor dk, Tensor dv) {
  const DType acc = accumulation_dtype(q.dtype());
  const int64_t h = q.size(0), T = q.size(1), D = q.size(2);
  const std::vector<Block> blocks = blocks_of(T);
  const bool need_qk = dq.defined(), need_v = dv.defined();
  const auto accumulator = [&](const Tensor& out) {
    return !out.defined() || out.dtype() == acc ? out : Tensor::empty({h, T, D}, acc, MemCategory::workspace);
  };
  Tensor dk_acc = accumulator(dk), dv_acc = accumulator(dv);
  for (size_t n = blocks.size(); n-- > 0;) {
    const auto [r0, r1] = blocks[n];
    const Tensor& p = probs[n];
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
    gemm(ds, k.slice(1, 0, r1), dq_rows);        // dq[r0:r1] = dS_i k[0:r1]
    gemm(ds, q.slice(1, r0, r1), dk_keys, ta);  // dk[0:r1] += dS_i^T q[r0:r1]
  }
  if (need_v && dv_acc.dtype() != dv.dtype()) dv.copy_from(dv_acc);
  if (need_qk && dk_acc.dtype() != dk.dtype()) dk.copy_from(dk_acc);
}
}  // namespace

void attention_heads_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             const std::vector<Tensor>& probs, Tensor& y) {
  const int64_t BH = q.size(0), T = q.size(1);
  const int64_t chunk = attention_heads_per_chunk(T, attention_query_block(T));
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t h1 = std::min(BH, h0 + chunk);
    Tensor yc = y.slice(0, h0, h1);
    attention_chunk_forward(q.slice(0, h0, h1), k.slice(0, h0, h1), v.slice(0, h0, h1), scale,
                            attention_prob_slices(probs, h0, h1), yc);
  }
}

void attention_heads_backward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<Tensor>& probs,
                              const Tensor& g, float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t BH = q.size(0), T = q.size(1);
  const int64_t chunk = attention_heads_per_chunk(T, attention_query_block(T));
  const auto part = [](const Tensor& t, int64_t h0, int64_t h1) { return t.defined() ? t.slice(0, h0, h1) : Tensor(); };
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t h1 = std::min(BH, h0 + chunk);
    attention_chunk_backward(q.slice(0, h0, h1), k.slice(0, h0, h1), v.slice(0, h0, h1),
                             attention_prob_slices(probs, h0, h1), g.slice(0, h0, h1), scale, part(dq, h0, h1),
                             part(dk, h0, h1), part(dv, h0, h1));
  }
}

// (B, T, n*C) rows <-> n tensors (B*H, T, D): one pass over the rows, D elements at a time.
void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) {
  const int64_t B = rows.size(0), T = rows.size(1), W = rows.size(2), n = static_cast<int64_t>(heads.size());
  const int64_t C = W / n, D = C / H;
  const size_t es = dtype_size(rows.dtype()), row_bytes = static_cast<size_t>(D) * es;
  char* r = static_cast<char*>(rows.raw_data());
  std::vector<char*> hp;
  for (const Tensor& h : heads) hp.push_back(static_cast<char*>(h.raw_data()));
#pragma omp parallel for schedule(static) if (B * T * W >= (1 << 16))
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t h = 0; h < H; ++h) {
        char* row = r + static_cast<size_t>(bt * W + p * C + h * D) * es;
        char* head = hp[static_cast<size_t>(p)] + static_cast<size_t>(((b * H + h) * T + t) * D) * es;
        if (to_heads)
          std::memcpy(head, row, row_bytes);
        else
          std::memcpy(row, head, row_bytes);
      }
  }
}

}  // namespace mixtrain::autograd
