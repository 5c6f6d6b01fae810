// The fused encoder attention (kernels/attention_ops.h, masked_attention_fused_*) on the CPU: one
// head per work item, blocks of 32 query rows on the bf16 tile GEMMs (amx_tiles.h: AMX where the
// CPU has it, else the scalar tiles), the scores, probabilities and their gradients in a per-thread
// workspace (tens of KiB at T = 128), nothing of size T x T in memory, and the dropout mask drawn
// once in forward and once in backward (the composed op drew it three times and wrote each T x T
// tensor through memory).
//
// One head (T x D, batch row b), Tp = T rounded up to 32, keys [0, Tk): Tk = the batch row's last
// real key rounded up to 32 (right padding: the keys past it are masked, their probabilities 0,
// so their columns are never computed; a row with no real key is uniform over all T keys, Tk = Tp):
//   forward   S = q[r0:r1] k[0:Tk]^T (f32); P = masked_softmax(scale S) (f32, as the masked
//             softmax's row loop); Pd = bf16(P f), f = dropout's factors (1/(1-p) or 0, or 1);
//             y[r0:r1] = Pd v[0:Tk]
//   backward  S, P, f again (the same loops on the same values: the same bits); Pd as above;
//             dP = (dy[r0:r1] v[0:Tk]^T) f;  dS = bf16(scale P (dP - rowsum(P dP)));
//             dq[r0:r1] = dS k[0:Tk];  dk^T += q[r0:r1]^T dS;  dv^T += dy[r0:r1]^T Pd  (f32, rounded once)
// Operands are staged padded to Tp rows (zeros past T) so every GEMM is whole blocks; the padded
// query rows' P, Pd and dS are zero. f32 operands (matmul precision medium) are rounded to bf16
// there, as medium's products take them.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/attention_ops.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd_forms.h"
#include "kernels/cpu/softmax_avx512.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {

namespace {
using cpu::attn::as_bf16;
using cpu::attn::kRows;

int64_t whole_blocks(int64_t n) { return (n + kRows - 1) / kRows * kRows; }

// Offsets (in floats) of one thread's buffers; bf16 buffers take half as many. Tp x D operands:
// q, k, v (and dy) staged, k^T and v in pairs for forward's GEMMs; backward adds v^T and k in
// pairs, q^T and dy^T, the dP block, the dS and Pd blocks in pairs, and dk^T, dv^T.
struct MaskedScratch {
  int64_t qs, ks, vs, gs, kp, vp, vtp, krp, qt, gt, pairs, s, dp, e, f, pr, o, pd, ds, pdp, dsp, blk, dkt,
      dvt, tmp, total;
  MaskedScratch(int64_t Tp, int64_t D, bool backward) {
    const int64_t op = Tp * D / 2;  // one Tp x D bf16 operand
    const int64_t nb = backward ? 1 : 0;
    qs = 0;
    ks = qs + op;
    vs = ks + op;
    gs = vs + op;
    kp = gs + nb * op;         // k^T in pairs (D/2 x 2 Tk)
    vp = kp + op;              // v in pairs (Tk/2 x 2D), forward only
    vtp = vp + (1 - nb) * op;  // v^T in pairs (D/2 x 2 Tk), backward
    krp = vtp + nb * op;       // k in pairs (Tk/2 x 2D), backward
    qt = krp + nb * op;        // q^T (D x Tp)
    gt = qt + nb * op;         // dy^T (D x Tp)
    pairs = gt + nb * op;      // a transpose's row pairs (Tp x D bf16)
    s = pairs + nb * op;       // scores of a block (32 x Tk f32)
    dp = s + kRows * Tp;       // dP of a block (32 x Tk f32)
    e = dp + nb * kRows * Tp;  // one row: P (f32), the dropout factors, P dP, dS (Tp f32 each)
    f = e + Tp;
    pr = f + Tp;
    o = pr + Tp;
    pd = o + Tp;                      // Pd rows of a block (32 x Tk bf16)
    ds = pd + kRows * Tp / 2;         // dS rows of a block (32 x Tk bf16)
    pdp = ds + nb * kRows * Tp / 2;   // Pd of a block in pairs of rows (16 x 2 Tk bf16)
    dsp = pdp + nb * kRows * Tp / 2;  // dS of a block in pairs of rows
    blk = dsp + nb * kRows * Tp / 2;  // y or dq of a block (32 x D f32)
    dkt = blk + kRows * D;            // dk^T (D x Tk f32)
    dvt = dkt + nb * D * Tp;          // dv^T (D x Tk f32)
    tmp = dvt + nb * D * Tp;          // dk or dv before rounding (Tp x D f32)
    total = tmp + nb * Tp * D;
  }
};

// The batch rows' key lengths: keys [0, last) hold every real key (the rest are padding).
std::vector<int64_t> real_key_ends(const Tensor& key_mask) {
  const int64_t B = key_mask.size(0), T = key_mask.size(1);
  const int32_t* m = key_mask.data<int32_t>();
  std::vector<int64_t> last(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) last[static_cast<size_t>(b)] = cpu::real_key_end(m + b * T, T);
  return last;
}

struct Dropout {
  bool on;
  uint64_t key, threshold;
  float scale;
  Dropout(float p, uint64_t seed)
      : on(p != 0.f),
        key(detail::counter_rng_key(seed)),
        threshold(dropout_threshold(p)),
        scale(1.0f / (1.0f - p)) {}
};

// One head's constants.
struct Head {
  int64_t T, Tp, Tk, n, D;  // n: keys the softmax spans (the real keys' end, or T for none real)
  const int32_t* mask;      // the batch row's key mask
  bool none_real;
  float scale;
  uint64_t first;  // dropout counter of P[0][0] of this head
};

// Row i's probabilities P[0:Tk) (f32) into e from its scores s: masked_softmax's row loop.
void probabilities(const Head& hd, const float* s, float* e) {
  if (hd.none_real) {  // every score + finfo.min rounds to finfo.min: uniform
    std::fill(e, e + hd.T, 1.f / static_cast<float>(hd.T));
    std::fill(e + hd.T, e + hd.Tk, 0.f);
    return;
  }
  const float mx = cpu::avx512_forms_run() ? cpu::masked_scale_max_avx512(s, hd.mask, hd.scale, e, hd.n)
                                           : cpu::masked_scale_max(s, hd.mask, hd.scale, e, hd.n);
  const float sum = cpu::exp_sub_sum_f32(e, mx, e, hd.n);
  cpu::scale_f32(e, 1.f / sum, e, hd.n);
  std::fill(e + hd.n, e + hd.Tk, 0.f);
}

// The dropout factors of row i (f, over the n keys the softmax spans; the rest of P is 0).
const float* factors(const Head& hd, const Dropout& dr, int64_t i, float* f) {
  if (!dr.on) return nullptr;
  cpu::dropout_factors(f, hd.n, dr.key, hd.first + static_cast<uint64_t>(i * hd.T), dr.threshold, dr.scale);
  return f;
}

// q, k, v rows ld apart; y rows ldy apart.
template <class IO>
void head_forward(const cpu::tiles::Kernels& tk, const Head& hd, const Dropout& dr, const IO* q, const IO* k,
                  const IO* v, int64_t ld, IO* y, int64_t ldy, float* w) {
  const int64_t T = hd.T, Tp = hd.Tp, Tk = hd.Tk, D = hd.D;
  const MaskedScratch L(Tp, D, false);
  bf16 *qs = as_bf16(w, L.qs), *ks = as_bf16(w, L.ks), *vs = as_bf16(w, L.vs), *kp = as_bf16(w, L.kp),
       *vp = as_bf16(w, L.vp), *pd = as_bf16(w, L.pd);
  float *s = w + L.s, *e = w + L.e, *f = w + L.f, *yb = w + L.blk;
  cpu::attn::stage_padded(q, ld, T, Tp, D, qs);
  cpu::attn::stage_padded(k, ld, T, Tp, D, ks);
  cpu::attn::stage_padded(v, ld, T, Tp, D, vs);
  cpu::tiles::pack_pairs_cols(ks, D, Tk, D, kp, 2 * Tk);  // B(d, j) = k[j][d]
  cpu::tiles::pack_pairs_rows(vs, D, Tk, D, vp, 2 * D);   // B(j, d) = v[j][d]
  for (int64_t r0 = 0; r0 < Tp; r0 += kRows) {
    const int64_t rows = std::min(kRows, T - r0);
    tk.gemm(kRows, Tk, D, qs + r0 * D, D, kp, 2 * Tk, s, Tk, false);
    for (int64_t i = 0; i < rows; ++i) {
      probabilities(hd, s + i * Tk, e);
      if (const float* fi = factors(hd, dr, r0 + i, f)) cpu::mul_rows(e, fi, e, hd.n);
      cpu::round_bf16_row(e, pd + i * Tk, Tk);
    }
    std::memset(static_cast<void*>(pd + rows * Tk), 0,
                static_cast<size_t>((kRows - rows) * Tk) * sizeof(bf16));
    tk.gemm(kRows, D, Tk, pd, Tk, vp, 2 * D, yb, D, false);
    cpu::attn::store_rows(yb, rows, D, y + r0 * ldy, ldy);
  }
}

// q, k, v rows ld apart; dy's ldg; dq, dk, dv's ldd.
template <class IO>
void head_backward(const cpu::tiles::Kernels& tk, const Head& hd, const Dropout& dr, const IO* q, const IO* k,
                   const IO* v, int64_t ld, const IO* g, int64_t ldg, IO* dq, IO* dk, IO* dv, int64_t ldd,
                   float* w) {
  const int64_t T = hd.T, Tp = hd.Tp, Tk = hd.Tk, D = hd.D;
  const MaskedScratch L(Tp, D, true);
  bf16 *qs = as_bf16(w, L.qs), *ks = as_bf16(w, L.ks), *vs = as_bf16(w, L.vs), *gs = as_bf16(w, L.gs),
       *kp = as_bf16(w, L.kp), *vtp = as_bf16(w, L.vtp), *krp = as_bf16(w, L.krp), *qt = as_bf16(w, L.qt),
       *gt = as_bf16(w, L.gt), *pairs = as_bf16(w, L.pairs), *pd = as_bf16(w, L.pd), *ds = as_bf16(w, L.ds),
       *pdp = as_bf16(w, L.pdp), *dsp = as_bf16(w, L.dsp);
  float *s = w + L.s, *dpb = w + L.dp, *e = w + L.e, *f = w + L.f, *pr = w + L.pr, *o = w + L.o,
        *dqb = w + L.blk, *dkt = w + L.dkt, *dvt = w + L.dvt, *tmp = w + L.tmp;
  cpu::attn::stage_padded(q, ld, T, Tp, D, qs);
  cpu::attn::stage_padded(k, ld, T, Tp, D, ks);
  cpu::attn::stage_padded(v, ld, T, Tp, D, vs);
  cpu::attn::stage_padded(g, ldg, T, Tp, D, gs);
  cpu::tiles::pack_pairs_cols(ks, D, Tk, D, kp, 2 * Tk);   // B(d, j) = k[j][d]
  cpu::tiles::pack_pairs_cols(vs, D, Tk, D, vtp, 2 * Tk);  // B(d, j) = v[j][d]
  cpu::tiles::pack_pairs_rows(ks, D, Tk, D, krp, 2 * D);   // B(j, d) = k[j][d]
  cpu::tiles::transpose(qs, D, Tp, D, qt, Tp, pairs);
  cpu::tiles::transpose(gs, D, Tp, D, gt, Tp, pairs);
  for (int64_t r0 = 0; r0 < Tp; r0 += kRows) {
    const int64_t rows = std::min(kRows, T - r0);
    tk.gemm(kRows, Tk, D, qs + r0 * D, D, kp, 2 * Tk, s, Tk, false);
    tk.gemm(kRows, Tk, D, gs + r0 * D, D, vtp, 2 * Tk, dpb, Tk, false);  // dy v^T
    for (int64_t i = 0; i < rows; ++i) {
      probabilities(hd, s + i * Tk, e);
      float* dpi = dpb + i * Tk;
      const float* fi = factors(hd, dr, r0 + i, f);
      if (fi) {
        cpu::mul_rows(e, fi, o, hd.n);  // Pd, exactly as forward's
        cpu::round_bf16_row(o, pd + i * Tk, hd.n);
        std::fill(pd + i * Tk + hd.n, pd + (i + 1) * Tk, bf16{});
        cpu::mul_rows(dpi, fi, dpi, hd.n);  // dP = dPd f
      } else {
        cpu::round_bf16_row(e, pd + i * Tk, Tk);
      }
      cpu::mul_rows(e, dpi, pr, hd.n);
      cpu::softmax_bwd_row(e, dpi, cpu::sum_f32(pr, hd.n), hd.scale, o, hd.n);
      std::fill(o + hd.n, o + Tk, 0.f);
      cpu::round_bf16_row(o, ds + i * Tk, Tk);
    }
    const size_t pad = static_cast<size_t>((kRows - rows) * Tk) * sizeof(bf16);
    std::memset(static_cast<void*>(pd + rows * Tk), 0, pad);
    std::memset(static_cast<void*>(ds + rows * Tk), 0, pad);
    tk.gemm(kRows, D, Tk, ds, Tk, krp, 2 * D, dqb, D, false);  // dq = dS k
    cpu::attn::store_rows(dqb, rows, D, dq + r0 * ldd, ldd);
    cpu::tiles::pack_pairs_rows(ds, Tk, kRows, Tk, dsp, 2 * Tk);
    cpu::tiles::pack_pairs_rows(pd, Tk, kRows, Tk, pdp, 2 * Tk);
    tk.gemm(D, Tk, kRows, qt + r0, Tp, dsp, 2 * Tk, dkt, Tk, r0 > 0);  // dk^T += q^T dS
    tk.gemm(D, Tk, kRows, gt + r0, Tp, pdp, 2 * Tk, dvt, Tk, r0 > 0);  // dv^T += dy^T Pd
  }
  // Keys [Tk, T) are padding no query sees: their gradients are zero.
  const int64_t kept = std::min(Tk, T);
  cpu::attn::store_transposed(dkt, Tk, kept, D, dk, ldd, tmp);
  cpu::attn::store_transposed(dvt, Tk, kept, D, dv, ldd, tmp);
  for (int64_t t = kept; t < T; ++t) {
    std::fill(dk + t * ldd, dk + t * ldd + D, IO{});
    std::fill(dv + t * ldd, dv + t * ldd + D, IO{});
  }
}

// The heads' constants: head h belongs to batch row h / Hb (Hb = heads per batch row).
struct MaskedHeads {
  int64_t Hb, T, Tp, D;
  std::vector<int64_t> ends;
  const int32_t* mask;
  float scale;
  uint64_t offset;
  Head at(int64_t h) const {
    const int64_t b = h / Hb, last = ends[static_cast<size_t>(b)];
    Head hd;
    hd.T = T;
    hd.Tp = Tp;
    hd.D = D;
    hd.none_real = last == 0;
    hd.n = hd.none_real ? T : last;
    hd.Tk = hd.none_real ? Tp : whole_blocks(last);
    hd.mask = mask + b * T;
    hd.scale = scale;
    hd.first = offset + static_cast<uint64_t>(h * T * T);
    return hd;
  }
};
MaskedHeads masked_heads(const Tensor& q, const Tensor& key_mask, float scale, uint64_t offset) {
  const int64_t T = q.size(-2);
  return MaskedHeads{cpu::attn::heads_of(q) / key_mask.size(0),
                     T,
                     whole_blocks(T),
                     q.size(-1),
                     real_key_ends(key_mask),
                     key_mask.data<int32_t>(),
                     scale,
                     offset};
}

template <class IO>
void masked_forward(const cpu::tiles::Kernels& tk, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& key_mask, float scale, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  const MaskedHeads hs = masked_heads(q, key_mask, scale, offset);
  const Dropout dr(p, seed);
  Tensor ws = cpu::masked_attention_fused_workspace(q, false);
  const cpu::attn::HeadLayout lq(q), lk(k), lv(v), ly(y);
  const IO *Q = q.data<IO>(), *K = k.data<IO>(), *V = v.data<IO>();
  IO* Y = y.data<IO>();
  cpu::attn::for_each_head(tk, ws, cpu::attn::heads_of(q), [&](int64_t h, float* w) {
    head_forward(tk, hs.at(h), dr, Q + lq.at(h), K + lk.at(h), V + lv.at(h), lq.ld, Y + ly.at(h), ly.ld, w);
  });
}

template <class IO>
void masked_backward(const cpu::tiles::Kernels& tk, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& key_mask, const Tensor& g, float scale, float p, uint64_t seed,
                     uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) {
  const MaskedHeads hs = masked_heads(q, key_mask, scale, offset);
  const Dropout dr(p, seed);
  Tensor ws = cpu::masked_attention_fused_workspace(q, true);
  const cpu::attn::HeadLayout lq(q), lk(k), lv(v), lg(g), ld(dq), lk2(dk), lv2(dv);
  const IO *Q = q.data<IO>(), *K = k.data<IO>(), *V = v.data<IO>(), *G = g.data<IO>();
  IO *DQ = dq.data<IO>(), *DK = dk.data<IO>(), *DV = dv.data<IO>();
  cpu::attn::for_each_head(tk, ws, cpu::attn::heads_of(q), [&](int64_t h, float* w) {
    head_backward(tk, hs.at(h), dr, Q + lq.at(h), K + lk.at(h), V + lv.at(h), lq.ld, G + lg.at(h), lg.ld,
                  DQ + ld.at(h), DK + lk2.at(h), DV + lv2.at(h), ld.ld, w);
  });
}
}  // namespace

Tensor cpu::masked_attention_fused_workspace(const Tensor& q, bool backward) {
  const int64_t per = MaskedScratch(whole_blocks(q.size(-2)), q.size(-1), backward).total;
  return Tensor::empty({attn::fused_threads(attn::heads_of(q)), per}, DType::f32, MemCategory::workspace);
}

void cpu::masked_attention_fused_forward_with(const tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& key_mask, float scale, float p,
                                              uint64_t seed, uint64_t offset, Tensor& y) {
  if (q.dtype() == DType::f32) return masked_forward<float>(tk, q, k, v, key_mask, scale, p, seed, offset, y);
  masked_forward<bf16>(tk, q, k, v, key_mask, scale, p, seed, offset, y);
}

void cpu::masked_attention_fused_backward_with(const tiles::Kernels& tk, const Tensor& q, const Tensor& k,
                                               const Tensor& v, const Tensor& key_mask, const Tensor& g,
                                               float scale, float p, uint64_t seed, uint64_t offset,
                                               Tensor& dq, Tensor& dk, Tensor& dv) {
  if (q.dtype() == DType::f32)
    return masked_backward<float>(tk, q, k, v, key_mask, g, scale, p, seed, offset, dq, dk, dv);
  masked_backward<bf16>(tk, q, k, v, key_mask, g, scale, p, seed, offset, dq, dk, dv);
}

void cpu::masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& key_mask, float scale, float p, uint64_t seed,
                                         uint64_t offset, Tensor& y) {
  if (force_reference())
    return ref::masked_attention_fused_forward(q, k, v, key_mask, scale, p, seed, offset, y);
  masked_attention_fused_forward_with(attn::kernels_here(), q, k, v, key_mask, scale, p, seed, offset, y);
}

void cpu::masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& key_mask, const Tensor& g, float scale, float p,
                                          uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk,
                                          Tensor& dv) {
  if (force_reference())
    return ref::masked_attention_fused_backward(q, k, v, key_mask, g, scale, p, seed, offset, dq, dk, dv);
  masked_attention_fused_backward_with(attn::kernels_here(), q, k, v, key_mask, g, scale, p, seed, offset, dq,
                                       dk, dv);
}

}  // namespace mixtrain
