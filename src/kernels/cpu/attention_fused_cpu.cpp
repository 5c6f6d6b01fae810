// The fused causal attention (kernels/attention_ops.h) on the CPU: one head per work item, its
// blocks of 32 query rows computed with bf16 tile GEMMs (amx_tiles.h: AMX where the CPU has it,
// else the scalar tile reference, the same blocked algorithm), the scores and their gradient
// living in a per-thread workspace of a few hundred KiB (in L2) instead of 4 MiB f32 tensors per
// chunk of heads, and no library call, parallel region or barrier per block.
//
// One head (T x D), block b = query rows [r0, r1), r1 = r0 + 32, keys [0, r1):
//   forward   S = q[r0:r1] k[0:r1]^T (f32);  P[r0:r1] = causal_softmax(scale * S) (bf16, saved);
//             y[r0:r1] = P[r0:r1, 0:r1] v[0:r1]
//   backward  dP = dy[r0:r1] v[0:r1]^T (f32);  dS = scale * P (dP - rowsum(P dP)) (bf16);
//             dq[r0:r1] = dS k[0:r1];  then per block of 32 keys [c0, c0 + 32), over the query
//             rows that see them ([c0, T)):  dk^T = q^T dS,  dv^T = dy^T P  (f32, rounded once)
// The softmax and its backward use the row loops of causal_softmax(_backward) (backward_cpu.cpp)
// on the same f32 scores, so P and dS are what the composed op computes from the same S and dP;
// the GEMMs add the same exact products in another order.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/attention_ops.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/cpu_ops.h"

namespace mixtrain {

namespace {
using cpu::attn::as_bf16;
using cpu::attn::for_each_head;
using cpu::attn::heads_of;
using Heads = cpu::attn::HeadLayout;
using cpu::attn::fused_threads;
using cpu::attn::io_dtype;
using cpu::attn::kernels_here;
using cpu::attn::kRows;
using cpu::attn::load_row;
using cpu::attn::Rows;
using cpu::attn::store_rows;
using cpu::attn::store_transposed;
using cpu::attn::tile_input;

// Offsets (in floats) of one thread's buffers in the workspace; bf16 buffers take half as many.
// f32 operands (matmul precision medium) are first rounded to bf16 in `stage` (q, k, v, and dy in
// backward), and each block of P in `pb`.
struct ForwardScratch {
  int64_t kp, vp, s, e, y, stage, pb, total;
  ForwardScratch(int64_t T, int64_t D, bool f32) {
    kp = 0;               // k^T in pairs (D/2 x 2T bf16)
    vp = kp + T * D / 2;  // v in pairs (T/2 x 2D bf16)
    s = vp + T * D / 2;   // scores of a block (32 x T f32)
    e = s + kRows * T;    // one row's exponentials (T f32)
    y = e + T;            // the block's output (32 x D f32)
    stage = y + kRows * D;
    pb = stage + (f32 ? 3 * T * D / 2 : 0);
    total = pb + (f32 ? kRows * T / 2 : 0);
  }
};
struct BackwardScratch {
  int64_t vtp, krp, qt, gt, dsp, pp, dsr, dp, dq, dkt, dvt, p, prod, o, tmp, stage, pb, total;
  BackwardScratch(int64_t T, int64_t D, bool f32) {
    vtp = 0;                   // v^T in pairs (D/2 x 2T bf16)
    krp = vtp + T * D / 2;     // k in pairs (T/2 x 2D bf16)
    qt = krp + T * D / 2;      // q^T (D x T bf16)
    gt = qt + T * D / 2;       // dy^T (D x T bf16)
    dsp = gt + T * D / 2;      // dS in pairs of query rows (T/2 x 2T bf16)
    pp = dsp + T * T / 2;      // P in pairs of query rows (T/2 x 2T bf16)
    dsr = pp + T * T / 2;      // dS rows of a block (32 x T bf16)
    dp = dsr + kRows * T / 2;  // dP of a block (32 x T f32)
    dq = dp + kRows * T;       // dq of a block (32 x D f32)
    dkt = dq + kRows * D;      // dk^T (D x T f32)
    dvt = dkt + D * T;         // dv^T (D x T f32)
    p = dvt + D * T;           // one row of P widened, the products, dS (T f32 each)
    prod = p + T;
    o = prod + T;
    tmp = o + T;  // a transpose's row pairs (T x D bf16), dk or dv before rounding (T x D f32)
    stage = tmp + T * D;
    pb = stage + (f32 ? 4 * T * D / 2 : 0);
    total = pb + (f32 ? kRows * T / 2 : 0);
  }
};

// Rows [r0, r0 + 32) of P, columns [0, r1), as bf16 with row stride T.
const bf16* prob_block(const bf16* P, int64_t T, int64_t r0, int64_t, bf16*) { return P + r0 * T; }
const bf16* prob_block(const float* P, int64_t T, int64_t r0, int64_t r1, bf16* pb) {
  for (int64_t i = 0; i < kRows; ++i) cpu::round_bf16_row(P + (r0 + i) * T, pb + i * T, r1);
  return pb;
}

template <class IO>
void head_forward(const cpu::tiles::Kernels& tk, const IO* q_in, const IO* k_in, const IO* v_in, int64_t ld,
                  float scale, int64_t T, int64_t D, IO* P, IO* y, int64_t ldy, float* w) {
  const ForwardScratch L(T, D, std::is_same_v<IO, float>);
  bf16 *kp = as_bf16(w, L.kp), *vp = as_bf16(w, L.vp), *stage = as_bf16(w, L.stage), *pb = as_bf16(w, L.pb);
  float *s = w + L.s, *e = w + L.e, *yb = w + L.y;
  const Rows q = tile_input(q_in, ld, T, D, stage);
  const Rows k = tile_input(k_in, ld, T, D, stage + T * D);
  const Rows v = tile_input(v_in, ld, T, D, stage + 2 * T * D);
  cpu::tiles::pack_pairs_cols(k.p, k.ld, T, D, kp, 2 * T);  // B(d, j) = k[j][d]
  cpu::tiles::pack_pairs_rows(v.p, v.ld, T, D, vp, 2 * D);  // B(j, d) = v[j][d]
  for (int64_t r0 = 0; r0 < T; r0 += kRows) {
    const int64_t r1 = r0 + kRows;
    tk.gemm(kRows, r1, D, q.p + r0 * q.ld, q.ld, kp, 2 * T, s, T, false);
    for (int64_t i = 0; i < kRows; ++i) {  // causal_softmax's row loop (backward_cpu.cpp)
      const int64_t n = r0 + i + 1;
      const float* si = s + i * T;
      float sum;
      if (scale > 0.f) {
        cpu::exp_scaled_sub(si, scale, scale * cpu::max_f32(si, n), e, n);
        sum = cpu::sum_f32(e, n);
      } else {
        cpu::scale_copy(si, scale, e, n);
        sum = cpu::exp_sub_sum_f32(e, cpu::max_f32(e, n), e, n);
      }
      std::fill(e + n, e + T, 0.f);
      cpu::store_row_scaled(e, 1.f / sum, P + (r0 + i) * T, io_dtype<IO>(), n, T);
    }
    tk.gemm(kRows, D, r1, prob_block(P, T, r0, r1, pb), T, vp, 2 * D, yb, D, false);
    store_rows(yb, kRows, D, y + r0 * ldy, ldy);
  }
}

template <class IO>
void head_backward(const cpu::tiles::Kernels& tk, const IO* q_in, const IO* k_in, const IO* v_in, int64_t ld,
                   const IO* P, const IO* g_in, int64_t ldg, float scale, int64_t T, int64_t D, IO* dq,
                   IO* dk, IO* dv, int64_t ldd, float* w) {
  const BackwardScratch L(T, D, std::is_same_v<IO, float>);
  const bool need_qk = dq != nullptr, need_v = dv != nullptr;
  bf16 *vtp = as_bf16(w, L.vtp), *krp = as_bf16(w, L.krp), *qt = as_bf16(w, L.qt), *gt = as_bf16(w, L.gt),
       *dsp = as_bf16(w, L.dsp), *pp = as_bf16(w, L.pp), *dsr = as_bf16(w, L.dsr),
       *stage = as_bf16(w, L.stage), *pb = as_bf16(w, L.pb);
  float *dp = w + L.dp, *dqb = w + L.dq, *dkt = w + L.dkt, *dvt = w + L.dvt, *pr = w + L.p,
        *prod = w + L.prod, *o = w + L.o, *tmp = w + L.tmp;
  const Rows g = tile_input(g_in, ldg, T, D, stage);
  if (need_qk) {
    const Rows q = tile_input(q_in, ld, T, D, stage + T * D);
    const Rows k = tile_input(k_in, ld, T, D, stage + 2 * T * D);
    const Rows v = tile_input(v_in, ld, T, D, stage + 3 * T * D);
    cpu::tiles::pack_pairs_cols(v.p, v.ld, T, D, vtp, 2 * T);  // B(d, j) = v[j][d]
    cpu::tiles::pack_pairs_rows(k.p, k.ld, T, D, krp, 2 * D);  // B(j, d) = k[j][d]
    cpu::tiles::transpose(q.p, q.ld, T, D, qt, T, as_bf16(tmp, 0));
  }
  if (need_v) cpu::tiles::transpose(g.p, g.ld, T, D, gt, T, as_bf16(tmp, 0));
  for (int64_t r0 = 0; r0 < T; r0 += kRows) {
    const int64_t r1 = r0 + kRows;
    if (need_v)
      cpu::tiles::pack_pairs_rows(prob_block(P, T, r0, r1, pb), T, kRows, r1, pp + (r0 / 2) * 2 * T, 2 * T);
    if (!need_qk) continue;
    tk.gemm(kRows, r1, D, g.p + r0 * g.ld, g.ld, vtp, 2 * T, dp, T, false);
    for (int64_t i = 0; i < kRows; ++i) {  // causal_softmax_backward's row loop (backward_cpu.cpp)
      const int64_t n = r0 + i + 1;
      const float* dpi = dp + i * T;
      load_row(P + (r0 + i) * T, pr, n);
      cpu::mul_rows(pr, dpi, prod, n);
      cpu::softmax_bwd_row(pr, dpi, cpu::sum_f32(prod, n), scale, o, n);
      std::fill(o + n, o + r1, 0.f);
      cpu::round_bf16_row(o, dsr + i * T, r1);  // dS in bf16 (f32: medium rounds it for the GEMMs)
    }
    tk.gemm(kRows, D, r1, dsr, T, krp, 2 * D, dqb, D, false);
    store_rows(dqb, kRows, D, dq + r0 * ldd, ldd);
    cpu::tiles::pack_pairs_rows(dsr, T, kRows, r1, dsp + (r0 / 2) * 2 * T, 2 * T);
  }
  // Keys [c0, c0 + 32) are seen by the query rows [c0, T) only: the blocks of pairs there hold
  // every column up to their own r1 > c0 + 31.
  for (int64_t c0 = 0; c0 < T; c0 += kRows) {
    const int64_t off = (c0 / 2) * 2 * T + 2 * c0;
    if (need_qk) tk.gemm(D, kRows, T - c0, qt + c0, T, dsp + off, 2 * T, dkt + c0, T, false);
    if (need_v) tk.gemm(D, kRows, T - c0, gt + c0, T, pp + off, 2 * T, dvt + c0, T, false);
  }
  if (need_qk) store_transposed(dkt, T, T, D, dk, ldd, tmp);
  if (need_v) store_transposed(dvt, T, T, D, dv, ldd, tmp);
}

template <class IO>
void fused_forward(const cpu::tiles::Kernels& tk, const Tensor& q, const Tensor& k, const Tensor& v,
                   float scale, Tensor& probs, Tensor& y) {
  const int64_t n = heads_of(q), T = q.size(-2), D = q.size(-1);
  Tensor ws = cpu::attention_fused_workspace(q, false);
  const Heads hq(q), hk(k), hv(v), hy(y);
  const IO *Q = q.data<IO>(), *K = k.data<IO>(), *V = v.data<IO>();
  IO *P = probs.data<IO>(), *Y = y.data<IO>();
  for_each_head(tk, ws, n, [&](int64_t h, float* w) {
    head_forward(tk, Q + hq.at(h), K + hk.at(h), V + hv.at(h), hq.ld, scale, T, D, P + h * T * T,
                 Y + hy.at(h), hy.ld, w);
  });
}

template <class IO>
void fused_backward(const cpu::tiles::Kernels& tk, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& probs, const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t n = heads_of(q), T = q.size(-2), D = q.size(-1);
  Tensor ws = cpu::attention_fused_workspace(q, true);
  const Heads hq(q), hk(k), hv(v), hg(g), hd(dv.defined() ? dv : dq);
  const IO *Q = q.data<IO>(), *K = k.data<IO>(), *V = v.data<IO>(), *P = probs.data<IO>(), *G = g.data<IO>();
  const auto out = [](Tensor& t) { return t.defined() ? t.data<IO>() : nullptr; };
  IO *DQ = out(dq), *DK = out(dk), *DV = out(dv);
  for_each_head(tk, ws, n, [&](int64_t h, float* w) {
    const int64_t o = hd.at(h);
    head_backward(tk, Q + hq.at(h), K + hk.at(h), V + hv.at(h), hq.ld, P + h * T * T, G + hg.at(h), hg.ld,
                  scale, T, D, DQ ? DQ + o : nullptr, DK ? DK + o : nullptr, DV ? DV + o : nullptr, hd.ld, w);
  });
}
}  // namespace

Tensor cpu::attention_fused_workspace(const Tensor& q, bool backward) {
  const int64_t T = q.size(-2), D = q.size(-1);
  const bool f32 = q.dtype() == DType::f32;
  const int64_t per = backward ? BackwardScratch(T, D, f32).total : ForwardScratch(T, D, f32).total;
  return Tensor::empty({fused_threads(heads_of(q)), per}, DType::f32, MemCategory::workspace);
}

void cpu::attention_fused_forward_with(const cpu::tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                       const Tensor& v, float scale, Tensor& probs, Tensor& y) {
  if (q.dtype() == DType::f32) return fused_forward<float>(tk, q, k, v, scale, probs, y);
  fused_forward<bf16>(tk, q, k, v, scale, probs, y);
}

void cpu::attention_fused_backward_with(const cpu::tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& probs, const Tensor& g, float scale,
                                        Tensor& dq, Tensor& dk, Tensor& dv) {
  if (q.dtype() == DType::f32) return fused_backward<float>(tk, q, k, v, probs, g, scale, dq, dk, dv);
  fused_backward<bf16>(tk, q, k, v, probs, g, scale, dq, dk, dv);
}

void cpu::attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                                  Tensor& probs, Tensor& y) {
  if (force_reference()) return ref::attention_fused_forward(q, k, v, scale, probs, y);
  attention_fused_forward_with(kernels_here(), q, k, v, scale, probs, y);
}

void cpu::attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                                   const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (force_reference()) return ref::attention_fused_backward(q, k, v, probs, g, scale, dq, dk, dv);
  attention_fused_backward_with(kernels_here(), q, k, v, probs, g, scale, dq, dk, dv);
}

}  // namespace mixtrain
