// Fast CPU backward kernels (cpu::gelu_backward, causal_softmax(_backward),
// softmax_last_backward, layer_norm_backward, embedding_backward, cross_entropy_backward,
// sum_to_row_accumulate, add_inplace): rows staged to fp32, vectorised fp32 loops, OpenMP over
// rows (or row groups / id groups), each result rounded once. f64, fp8 and layouts without a row
// view go to the scalar references (also everything when force_reference() is on).
// Determinism: every split is fixed by the data (rows, 32-row groups, one id per work item), never
// by the thread count, so results are bit-identical for any number of threads.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/gelu_avx512.h"
#include "kernels/ops_backward.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {
constexpr int64_t kLnGroupRows = 32;  // rows per layer-norm parameter-gradient partial sum
constexpr int64_t kLnColChunk = 256;  // columns per work item of the partials' pairwise sums

// Per-thread fp32 rows for these kernels (more slots than cpu::scratch offers).
float* bscratch(int slot, int64_t n) {
  thread_local std::vector<float> bufs[6];
  std::vector<float>& b = bufs[slot];
  if (b.size() < static_cast<size_t>(std::max<int64_t>(n, 1)))
    b.resize(static_cast<size_t>(std::max<int64_t>(n, 1)));
  return b.data();
}

// A (C) or (R) tensor of any layout as a contiguous fp32 vector.
std::vector<float> vec_f32(const Tensor& t) {
  if (t.is_contiguous()) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert_any(t.raw_data(), t.dtype(), v.data(), DType::f32, v.size());
    return v;
  }
  return t.to_floats();
}

// out (C) += add (fp32), one rounding per element into out's dtype, any stride.
void accumulate_vec(Tensor& out, const float* add, int64_t C) {
  const int64_t s = C > 1 ? out.stride(0) : 1;
  for (int64_t c = 0; c < C; ++c)
    store_from_f32(out.raw_data(), out.dtype(), c * s,
                   load_as_f32(out.raw_data(), out.dtype(), c * s) + add[c]);
}

// ---- vectorised row loops -------------------------------------------------------------------------
// gelu'(x) = s + 2 x s (1 - s) k (1 + 3 a x^2), s = 1 / (1 + e), 1 - s = e s, e = exp(-2u) (see the
// reference). -2u is capped at 80 so e s stays finite, and past it s is taken as its limit 0 (the
// derivative there is below 1e-30 anyway): so x = -inf and x below -5e19 give NaN, as the
// reference's 2 x s (1 - s) (1 + 3 a x^2) = 0 * inf does.
MIXTRAIN_SIMD_CLONES void gelu_backward_f32(const float* x, const float* g, float* o, int64_t n) {
  constexpr float k = 0.7978845608028654f, a = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = k * (v + a * v * v * v);
    const float t = -2.f * u;
    const float e = exp_f32(t < 80.f ? t : 80.f);
    const float s = t > 80.f ? 0.f : 1.f / (1.f + e);
    o[i] = g[i] * (s + 2.f * v * s * (e * s) * k * (1.f + 3.f * a * v * v));
  }
}
MIXTRAIN_SIMD_CLONES void scale_inplace(float* o, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] *= s;
}
MIXTRAIN_SIMD_CLONES void add_rows(float* acc, const float* a, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] += a[i];
}

// rows (n rows of stride `stride`, w columns used) summed down each column into row 0, in
// pairwise_sum's tree (left half + right half, left = n / 2): each column's sum is pairwise_sum of
// that column bit for bit. The rows are overwritten.
void pairwise_rows(float* rows, int64_t n, int64_t stride, int64_t w) {
  if (n <= 1) return;
  const int64_t left = n / 2;
  pairwise_rows(rows, left, stride, w);
  pairwise_rows(rows + left * stride, n - left, stride, w);
  add_rows(rows, rows + left * stride, w);
}
}  // namespace

// The softmax row loops, shared with the fused attention (attention_fused_cpu.cpp; cpu_rows.h).
// o = exp(scale * x - m): the scaled value rounded first, as a scaled copy would hold it.
MIXTRAIN_SIMD_CLONES void exp_scaled_sub(const float* x, float scale, float m, float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = scale * x[i];
    o[i] = exp_f32(v - m);
  }
}
MIXTRAIN_SIMD_CLONES void scale_copy(const float* x, float s, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = s * x[i];
}
// Stores src[0:n) * s and src[n:total) as they are into a row of dtype t (one rounding each).
void store_row_scaled(float* src, float s, void* dst, DType t, int64_t n, int64_t total) {
  if (t == DType::bf16) {
    round_bf16_row_scaled(src, s, static_cast<bf16*>(dst), n);
    round_bf16_row(src + n, static_cast<bf16*>(dst) + n, total - n);
    return;
  }
  scale_inplace(src, s, n);
  store_row(src, dst, t, total);
}
MIXTRAIN_SIMD_CLONES void mul_rows(const float* a, const float* b, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
}
// dx = scale * y * (dy - dot)
MIXTRAIN_SIMD_CLONES void softmax_bwd_row(const float* y, const float* dy, float dot, float scale, float* o,
                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = scale * y[i] * (dy[i] - dot);
}
namespace {
// Layer norm backward, first pass over a row: xhat, g = dout * w, and the row's share of the
// parameter gradients (pw += dout * xhat, pb += dout).
MIXTRAIN_SIMD_CLONES void ln_prep(const float* x, const float* d, const float* w, float mu, float rs,
                                  float* xh, float* g, float* gx, float* pw, float* pb, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float h = (x[i] - mu) * rs;
    xh[i] = h;
    g[i] = d[i] * w[i];
    gx[i] = g[i] * h;
    pw[i] += d[i] * h;
    pb[i] += d[i];
  }
}
MIXTRAIN_SIMD_CLONES void ln_dx(const float* g, const float* xh, float mean_g, float mean_gx, float rs,
                                float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = rs * (g[i] - mean_g - xh[i] * mean_gx);
}

// Number of keys row r of a (..., Tq, Tk) tensor attends to (all C when not causal).
inline int64_t allowed(int64_t r, int64_t Tq, int64_t Tk, bool causal) {
  return causal ? (r % Tq) + (Tk - Tq) + 1 : Tk;
}

// softmax_last_backward (causal = false, scale = 1) and causal_softmax_backward.
void softmax_backward(const Tensor& y, const Tensor& dy, float scale, bool causal, Tensor& dx) {
  RowView yv, gv, ov;
  const Tensor yk = rows_or_copy(y, yv), gk = rows_or_copy(dy, gv);
  Tensor o = rows_for_output(dx, ov);
  const int64_t R = yv.rows, C = yv.cols, Tq = causal ? y.size(-2) : 1;
  const int nt = threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = allowed(r, Tq, C, causal);
    const float* p = load_row(yv.row(r), yv.dtype, C, bscratch(0, C));
    const float* g = load_row(gv.row(r), gv.dtype, C, bscratch(1, C));
    float* prod = bscratch(3, C);
    mul_rows(p, g, prod, n);
    const float dot = sum_f32(prod, n);
    float* q = out_row(ov.row(r), ov.dtype, bscratch(2, C));
    softmax_bwd_row(p, g, dot, scale, q, n);
    std::fill(q + n, q + C, 0.f);
    store_row(q, ov.row(r), ov.dtype, C);
  }
  finish_output(o, dx);
}
}  // namespace
}  // namespace cpu

void cpu::gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  if (!cpu::all_fast({&x, &dout, &dx})) return ref::gelu_backward(x, dout, dx);
  cpu::RowView in[2], ov;
  const Tensor xk = cpu::rows_or_copy(x, in[0]), gk = cpu::rows_or_copy(dout, in[1]);
  Tensor o = cpu::rows_for_output(dx, ov);
  if (cpu::gelu_avx512_takes({in[0].dtype, in[1].dtype, ov.dtype})) {
    const DType xt = in[0].dtype, gt = in[1].dtype, ot = ov.dtype;
    cpu::elementwise_unstaged<2>(in, ov, [=](const void* const* p, void* dst, int64_t n) {
      cpu::gelu_backward_row_avx512(p[0], xt, p[1], gt, dst, ot, n);
    });
  } else {
    cpu::elementwise<2>(in, ov, [](const float* const* p, float* dst, int64_t n) {
      cpu::gelu_backward_f32(p[0], p[1], dst, n);
    });
  }
  cpu::finish_output(o, dx);
}

void cpu::causal_softmax(const Tensor& x, float scale, Tensor& y) {
  if (!cpu::all_fast({&x, &y})) return ref::causal_softmax(x, scale, y);
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(y, ov);
  const int64_t R = xv.rows, Tk = xv.cols, Tq = x.size(-2);
  const int nt = cpu::threads_for(R * Tk);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = cpu::allowed(r, Tq, Tk, true);
    const float* p = cpu::load_row(xv.row(r), xv.dtype, Tk, cpu::bscratch(0, Tk));
    float* q = cpu::out_row(ov.row(r), ov.dtype, cpu::bscratch(2, Tk));
    float sum;
    if (scale > 0.f) {  // max(scale * x) = scale * max(x) (rounding is monotone): no scaled copy
      cpu::exp_scaled_sub(p, scale, scale * cpu::max_f32(p, n), q, n);
      sum = cpu::sum_f32(q, n);
    } else {  // the max of the scaled values (scale may be negative)
      cpu::scale_copy(p, scale, q, n);
      sum = cpu::exp_sub_sum_f32(q, cpu::max_f32(q, n), q, n);
    }
    const float inv = 1.f / sum;
    std::fill(q + n, q + Tk, 0.f);
    cpu::store_row_scaled(q, inv, ov.row(r), ov.dtype, n, Tk);
  }
  cpu::finish_output(o, y);
}

void cpu::causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) {
  if (!cpu::all_fast({&y, &dy, &dx})) return ref::causal_softmax_backward(y, dy, scale, dx);
  cpu::softmax_backward(y, dy, scale, true, dx);
}

void cpu::softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (!cpu::all_fast({&y, &dy, &dx})) return ref::softmax_last_backward(y, dy, dx);
  cpu::softmax_backward(y, dy, 1.f, false, dx);
}

void cpu::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                              const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const bool normalized = !mean.defined();  // x holds x-hat already (see ops_backward.h)
  if (!cpu::all_fast({&x, &weight, &dout, &dx, &dweight, &dbias}) ||
      (!normalized && mean.dtype() != DType::f32) || rstd.dtype() != DType::f32)
    return ref::layer_norm_backward(x, weight, mean, rstd, dout, dx, dweight, dbias);
  cpu::RowView xv, gv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv), gk = cpu::rows_or_copy(dout, gv);
  Tensor o = cpu::rows_for_output(dx, ov);
  const int64_t R = xv.rows, C = xv.cols;
  const std::vector<float> w = cpu::vec_f32(weight), rs = cpu::vec_f32(rstd);
  const std::vector<float> mu =
      normalized ? std::vector<float>(static_cast<size_t>(R), 0.f) : cpu::vec_f32(mean);
  // Parameter gradients: one fp32 partial row per fixed group of kLnGroupRows rows (rows added in
  // order), then the group partials added pairwise per column. Thread count only decides who
  // computes which group.
  const int64_t groups = (R + cpu::kLnGroupRows - 1) / cpu::kLnGroupRows;
  std::vector<float> part_w(static_cast<size_t>(groups * C)), part_b(static_cast<size_t>(groups * C));
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t grp = 0; grp < groups; ++grp) {
    float* pw = part_w.data() + grp * C;
    float* pb = part_b.data() + grp * C;
    for (int64_t r = grp * cpu::kLnGroupRows; r < std::min(R, (grp + 1) * cpu::kLnGroupRows); ++r) {
      const float* p = cpu::load_row(xv.row(r), xv.dtype, C, cpu::bscratch(0, C));
      const float* d = cpu::load_row(gv.row(r), gv.dtype, C, cpu::bscratch(1, C));
      float* xh = cpu::bscratch(3, C);
      float* g = cpu::bscratch(4, C);
      float* gx = cpu::bscratch(5, C);
      const float rsr = rs[static_cast<size_t>(r)];
      // x-hat = (x - 0) * 1 is exact: the normalized mode computes with the very same x-hat.
      cpu::ln_prep(p, d, w.data(), mu[static_cast<size_t>(r)], normalized ? 1.f : rsr, xh, g, gx, pw, pb, C);
      const float mean_g = cpu::sum_f32(g, C) / static_cast<float>(C);
      const float mean_gx = cpu::sum_f32(gx, C) / static_cast<float>(C);
      float* q = cpu::out_row(ov.row(r), ov.dtype, cpu::bscratch(2, C));
      cpu::ln_dx(g, xh, mean_g, mean_gx, rsr, q, C);
      cpu::store_row(q, ov.row(r), ov.dtype, C);
    }
  }
  cpu::finish_output(o, dx);
  if (groups == 0) return;  // no rows: nothing to add to the parameter gradients
  // Each column's group partials added in pairwise_sum's tree, a chunk of columns at a time (the
  // same sums, bit for bit, as pairwise_sum over each column; vectorised along the row).
  const int64_t col_chunks = (C + cpu::kLnColChunk - 1) / cpu::kLnColChunk;
  const int ntc = cpu::threads_for(groups * C);
#pragma omp parallel for num_threads(ntc) schedule(static) if (ntc > 1)
  for (int64_t item = 0; item < 2 * col_chunks; ++item) {
    float* part = (item < col_chunks ? part_w : part_b).data();
    const int64_t c0 = (item % col_chunks) * cpu::kLnColChunk;
    cpu::pairwise_rows(part + c0, groups, C, std::min(cpu::kLnColChunk, C - c0));
  }
  const float* tw = part_w.data();  // row 0: the sums
  const float* tb = part_b.data();
  cpu::accumulate_vec(dweight, tw, C);
  cpu::accumulate_vec(dbias, tb, C);
}

void cpu::embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  cpu::RowView wv, gv;
  if (!cpu::all_fast({&dout, &dweight}) || !cpu::as_rows(dweight, wv))
    return ref::embedding_backward(ids, dout, dweight);
  const Tensor gk = cpu::rows_or_copy(dout, gv);
  const int64_t V = dweight.size(0), C = dweight.size(1), R = ids.numel();
  const Tensor idc = ids.contiguous();
  const int32_t* id = idc.data<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    if (id[r] < 0 || id[r] >= V)
      throw ArgumentError("embedding_backward: id " + std::to_string(id[r]) + " at position " +
                          std::to_string(r) + " is outside [0, " + std::to_string(V) + ")");
  // Positions grouped by id (row order inside a group); one group per work item, so each dweight
  // row is written by one thread and its sum never depends on the thread count.
  std::vector<int64_t> order(static_cast<size_t>(R));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [id](int64_t a, int64_t b) { return id[a] < id[b]; });
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < R; ++i)
    if (i == 0 || id[order[static_cast<size_t>(i)]] != id[order[static_cast<size_t>(i - 1)]])
      starts.push_back(i);
  starts.push_back(R);
  const int64_t G = static_cast<int64_t>(starts.size()) - 1;
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t grp = 0; grp < G; ++grp) {
    float* acc = cpu::bscratch(0, C);
    std::fill(acc, acc + C, 0.f);
    for (int64_t i = starts[static_cast<size_t>(grp)]; i < starts[static_cast<size_t>(grp + 1)]; ++i)
      cpu::add_rows(
          acc, cpu::load_row(gv.row(order[static_cast<size_t>(i)]), gv.dtype, C, cpu::bscratch(1, C)), C);
    void* row = wv.row(id[order[static_cast<size_t>(starts[static_cast<size_t>(grp)])]]);
    const float* cur = cpu::load_row(row, wv.dtype, C, cpu::bscratch(2, C));
    float* q = cpu::out_row(row, wv.dtype, cpu::bscratch(3, C));
    for (int64_t c = 0; c < C; ++c) q[c] = cur[c] + acc[c];
    cpu::store_row(q, row, wv.dtype, C);
  }
}

void cpu::cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits) {
  if (!cpu::all_fast({&logits, &dlogits}))
    return ref::cross_entropy_backward(logits, targets, dloss, dlogits);
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(logits, xv);
  Tensor o = cpu::rows_for_output(dlogits, ov);
  const int64_t R = xv.rows, V = xv.cols;
  const Tensor tc = targets.contiguous();
  const int32_t* tgt = tc.data<int32_t>();
  int64_t n_valid = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (tgt[r] == -1) continue;
    if (tgt[r] < 0 || tgt[r] >= V)
      throw ArgumentError("cross_entropy_backward: target " + std::to_string(tgt[r]) + " in row " +
                          std::to_string(r) + " is outside [0, " + std::to_string(V) + ")");
    ++n_valid;
  }
  const float coef = n_valid ? dloss / static_cast<float>(n_valid) : 0.f;
  const int nt = cpu::threads_for(R * V);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = tgt[r];
    float* q = cpu::out_row(ov.row(r), ov.dtype, cpu::bscratch(2, V));
    if (t == -1) {
      std::fill(q, q + V, 0.f);
    } else {
      // Every read of the logits row happens before q is written: dlogits may be logits itself.
      const float* p = cpu::load_row(xv.row(r), xv.dtype, V, cpu::bscratch(0, V));
      const float m = cpu::max_f32(p, V);
      const float sum = cpu::exp_sub_sum_f32(p, m, q, V);
      const float inv = 1.f / sum, e_t = q[t];
      cpu::scale_inplace(q, inv * coef, V);
      q[t] = (e_t * inv - 1.f) * coef;
    }
    cpu::store_row(q, ov.row(r), ov.dtype, V);
  }
  cpu::finish_output(o, dlogits);
}

void cpu::sum_to_row_accumulate(const Tensor& x, Tensor& out) {
  if (!cpu::all_fast({&x, &out})) return ref::sum_to_row_accumulate(x, out);
  // The fast, thread-count-independent column sums of sum_to_row, then one fp32 add into out.
  Tensor tmp = Tensor::empty(Shape{out.size(0)}, DType::f32, MemCategory::workspace);
  cpu::sum_to_row(x, tmp);
  cpu::accumulate_vec(out, tmp.data<float>(), out.size(0));
}

void cpu::add_inplace(Tensor& acc, const Tensor& x) {
  if (!cpu::all_fast({&acc, &x})) return ref::add_inplace(acc, x);
  cpu::add(acc, x, acc);  // elementwise, so out may be the input acc itself
}

}  // namespace mixtrain
