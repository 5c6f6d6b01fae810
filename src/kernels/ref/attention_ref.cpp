// The scalar references of heads_copy and dropout_mask (kernels/attention_ops.h): one element at
// a time through the dtype-generic accessors, written from the definitions rather than from the
// CPU kernels (which copy whole head rows and work on contiguous fp32 copies).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_ops.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain::ref {

// rows[b, t, p*C + h*D + d] <-> heads[p][b*H + h, t, d].
void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) {
  const int64_t B = rows.size(0), T = rows.size(1), n = static_cast<int64_t>(heads.size());
  const int64_t C = rows.size(2) / n, D = C / H;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d) {
            const Tensor& hd = heads[static_cast<size_t>(p)];
            const int64_t ro = b * rows.stride(0) + t * rows.stride(1) + (p * C + h * D + d) * rows.stride(2);
            const int64_t ho = (b * H + h) * hd.stride(0) + t * hd.stride(1) + d * hd.stride(2);
            if (to_heads)
              detail::store<double>(hd, ho, detail::load<double>(rows, ro));  // exact for every float dtype
            else
              detail::store<double>(rows, ro, detail::load<double>(hd, ho));
          }
}

// out[i] = keep(i) ? x[i] * (1 / (1 - p)) : 0, keep(i) = counter_rng(seed, offset + i) >= p * 2^32,
// i in row-major order. The scale 1/(1-p) is formed in fp32 and the product in double, rounded
// once to out's dtype (f64: all in double).
void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) {
  const uint64_t threshold = dropout_threshold(p);
  const bool f64 = x.dtype() == DType::f64;
  const double keep_scale = f64 ? 1.0 / (1.0 - p) : static_cast<double>(1.0f / (1.0f - p));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = counter_rng(seed, offset + static_cast<uint64_t>(i)) >= threshold;
    const double v = keep ? detail::load<double>(x, detail::elem_offset(x, i)) * keep_scale : 0.0;
    const int64_t o = detail::elem_offset(out, i);
    if (f64)
      detail::store<double>(out, o, v);
    else
      detail::store<float>(out, o, static_cast<float>(v));  // the CPU kernel's fp32 value
  }
}

}  // namespace mixtrain::ref

namespace mixtrain::ref {

// The fused causal attention from its definition, every step a reference op on whole heads:
//   S = q k^T (f32); P = causal_softmax(scale * S) (bf16); y = P v
//   dP = dy v^T (f32); dS = causal_softmax_backward(P, dP, scale) (bf16); dq = dS k;
//   dk = dS^T q; dv = P^T dy (f32 sums, each output rounded once)
namespace {
// One head of a (n, T, D) or (B, H, T, D) operand as T x D values (double), each a GEMM input
// the way the fused op multiplies it: f32 rounded to bf16 (matmul precision medium), bf16 as is.
using Mat = std::vector<double>;
double as_gemm_input(double v, DType t) {
  return t == DType::f32 ? static_cast<double>(f32_from_bf16(bf16_from_f32(static_cast<float>(v)))) : v;
}
int64_t head_offset(const Tensor& t, int64_t h) {
  return t.dim() == 4 ? (h / t.size(1)) * t.stride(0) + (h % t.size(1)) * t.stride(1) : h * t.stride(0);
}
Mat load_head(const Tensor& t, int64_t h, bool gemm_input) {
  const int64_t T = t.size(-2), D = t.size(-1), o = head_offset(t, h);
  Mat m(static_cast<size_t>(T * D));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const double v = detail::load<double>(t, o + i * t.stride(-2) + d * t.stride(-1));
      m[static_cast<size_t>(i * D + d)] = gemm_input ? as_gemm_input(v, t.dtype()) : v;
    }
  return m;
}
void store_head(const Tensor& t, int64_t h, const Mat& m) {
  const int64_t T = t.size(-2), D = t.size(-1), o = head_offset(t, h);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t d = 0; d < D; ++d)
      detail::store<double>(t, o + i * t.stride(-2) + d * t.stride(-1), m[static_cast<size_t>(i * D + d)]);
}
// A value as stored in dtype t and read back.
double stored(double v, DType t) {
  return t == DType::f32 ? static_cast<double>(static_cast<float>(v))
                         : static_cast<double>(f32_from_bf16(bf16_from_f32(static_cast<float>(v))));
}
}  // namespace

// Per head, with fp32 scores (products and sums in double, rounded to f32 once: the order of the
// fp32 sums is the only freedom the fast kernel has):
//   S = q k^T;  P[i, j] = exp(scale S[i, j] - max_j) / sum_j (j <= i), stored in q's dtype;
//   y = P v (P and v as GEMM inputs).
void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y) {
  const int64_t T = q.size(-2), D = q.size(-1), n = probs.size(0);
  const DType pt = probs.dtype();
  for (int64_t h = 0; h < n; ++h) {
    const Mat Q = load_head(q, h, true), K = load_head(k, h, true), V = load_head(v, h, true);
    Mat Y(static_cast<size_t>(T * D), 0.0);
    std::vector<double> srow(static_cast<size_t>(T)), prow(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += Q[size_t(i * D + d)] * K[size_t(j * D + d)];
        srow[size_t(j)] = static_cast<double>(scale * static_cast<float>(acc));
        m = std::max(m, srow[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(srow[size_t(j)] - m);
      for (int64_t j = 0; j < T; ++j) {
        const double p = j <= i ? stored(std::exp(srow[size_t(j)] - m) / sum, pt) : 0.0;
        detail::store<double>(probs, (h * T + i) * T + j, p);
        prow[size_t(j)] = as_gemm_input(p, pt);
      }
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += prow[size_t(j)] * V[size_t(j * D + d)];
        Y[size_t(i * D + d)] = acc;
      }
    }
    store_head(y, h, Y);
  }
}

//   dP = dy v^T (f32);  dS[i, j] = scale P (dP - sum_j P dP) (j <= i), rounded to bf16 as the
//   GEMMs take it;  dq = dS k;  dk = dS^T q;  dv = P^T dy
void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t T = q.size(-2), D = q.size(-1), n = probs.size(0);
  const DType pt = probs.dtype();
  for (int64_t h = 0; h < n; ++h) {
    const Mat Q = load_head(q, h, true), K = load_head(k, h, true), V = load_head(v, h, true),
              G = load_head(g, h, true);
    Mat P(static_cast<size_t>(T * T)), dS(static_cast<size_t>(T * T), 0.0);
    for (int64_t i = 0; i < T * T; ++i) P[size_t(i)] = detail::load<double>(probs, h * T * T + i);
    if (dv.defined()) {
      Mat DV(static_cast<size_t>(T * D), 0.0);
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t i = j; i < T; ++i)
            DV[size_t(j * D + d)] += as_gemm_input(P[size_t(i * T + j)], pt) * G[size_t(i * D + d)];
      store_head(dv, h, DV);
    }
    if (!dq.defined()) continue;
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> dp(static_cast<size_t>(i + 1));
      double dot = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += G[size_t(i * D + d)] * V[size_t(j * D + d)];
        dp[size_t(j)] = static_cast<double>(static_cast<float>(acc));
        dot += P[size_t(i * T + j)] * dp[size_t(j)];
      }
      for (int64_t j = 0; j <= i; ++j)
        dS[size_t(i * T + j)] = stored(scale * P[size_t(i * T + j)] * (dp[size_t(j)] - dot), DType::bf16);
    }
    Mat DQ(static_cast<size_t>(T * D), 0.0), DK(static_cast<size_t>(T * D), 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t d = 0; d < D; ++d) {
          DQ[size_t(i * D + d)] += dS[size_t(i * T + j)] * K[size_t(j * D + d)];
          DK[size_t(j * D + d)] += dS[size_t(i * T + j)] * Q[size_t(i * D + d)];
        }
    store_head(dq, h, DQ);
    store_head(dk, h, DK);
  }
}

namespace {
// One head of the fused encoder attention, row by row: P (double, rounded to f32 as the fast
// kernel keeps it), the dropout factors f, Pd = bf16(P f). Row i of head h (batch row b = h / H).
struct MaskedHead {
  int64_t T;
  std::vector<double> P, f;  // T x T
};
MaskedHead masked_probabilities(const Mat& Q, const Mat& K, const Tensor& key_mask, int64_t h, int64_t H,
                                int64_t T, int64_t D, float scale, float p, uint64_t seed, uint64_t offset) {
  MaskedHead m{T, std::vector<double>(static_cast<size_t>(T * T), 0.0),
               std::vector<double>(size_t(T * T), 1.0)};
  const int64_t b = h / H;
  const auto real = [&](int64_t j) {
    return key_mask.data<int32_t>()[b * key_mask.stride(0) + j * key_mask.stride(1)] != 0;
  };
  bool any = false;
  for (int64_t j = 0; j < T; ++j) any = any || real(j);
  const uint64_t threshold = dropout_threshold(p);
  const double keep_scale = static_cast<double>(1.0f / (1.0f - p));
  std::vector<double> srow(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    double* P = m.P.data() + i * T;
    if (!any) {
      for (int64_t j = 0; j < T; ++j) P[j] = static_cast<double>(1.f / static_cast<float>(T));
    } else {
      double mx = -INFINITY;
      for (int64_t j = 0; j < T; ++j) {
        if (!real(j)) continue;
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += Q[size_t(i * D + d)] * K[size_t(j * D + d)];
        srow[size_t(j)] = static_cast<double>(scale * static_cast<float>(acc));
        mx = std::max(mx, srow[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < T; ++j)
        if (real(j)) sum += std::exp(srow[size_t(j)] - mx);
      for (int64_t j = 0; j < T; ++j)
        P[j] = real(j) ? static_cast<double>(static_cast<float>(std::exp(srow[size_t(j)] - mx) / sum)) : 0.0;
    }
    if (p != 0.f)
      for (int64_t j = 0; j < T; ++j)
        m.f[size_t(i * T + j)] =
            counter_rng(seed, offset + static_cast<uint64_t>((h * T + i) * T + j)) >= threshold ? keep_scale
                                                                                                : 0.0;
  }
  return m;
}
}  // namespace

//   S = q k^T (f32);  P = masked_softmax(scale S) (f32);  Pd = bf16(P f);  y = Pd v
void masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    float scale, float p, uint64_t seed, uint64_t offset, Tensor& y) {
  const int64_t n = q.dim() == 4 ? q.size(0) * q.size(1) : q.size(0), T = q.size(-2), D = q.size(-1),
                H = n / key_mask.size(0);
  for (int64_t h = 0; h < n; ++h) {
    const Mat Q = load_head(q, h, true), K = load_head(k, h, true), V = load_head(v, h, true);
    const MaskedHead m = masked_probabilities(Q, K, key_mask, h, H, T, D, scale, p, seed, offset);
    Mat Y(static_cast<size_t>(T * D), 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const double pd = stored(m.P[size_t(i * T + j)] * m.f[size_t(i * T + j)], DType::bf16);
        for (int64_t d = 0; d < D; ++d) Y[size_t(i * D + d)] += pd * V[size_t(j * D + d)];
      }
    store_head(y, h, Y);
  }
}

//   dP = (dy v^T) f (f32 GEMM);  dS = bf16(scale P (dP - sum_j P dP));  dq = dS k;  dk = dS^T q;
//   dv = Pd^T dy
void masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& key_mask, const Tensor& g, float scale, float p,
                                     uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t n = q.dim() == 4 ? q.size(0) * q.size(1) : q.size(0), T = q.size(-2), D = q.size(-1),
                H = n / key_mask.size(0);
  for (int64_t h = 0; h < n; ++h) {
    const Mat Q = load_head(q, h, true), K = load_head(k, h, true), V = load_head(v, h, true),
              G = load_head(g, h, true);
    const MaskedHead m = masked_probabilities(Q, K, key_mask, h, H, T, D, scale, p, seed, offset);
    Mat DQ(static_cast<size_t>(T * D), 0.0), DK(DQ), DV(DQ);
    std::vector<double> dp(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      const double* P = m.P.data() + i * T;
      const double* f = m.f.data() + i * T;
      double dot = 0;
      for (int64_t j = 0; j < T; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += G[size_t(i * D + d)] * V[size_t(j * D + d)];
        dp[size_t(j)] = static_cast<double>(static_cast<float>(acc)) * f[j];
        dot += P[j] * dp[size_t(j)];
      }
      for (int64_t j = 0; j < T; ++j) {
        const double ds = stored(scale * P[j] * (dp[size_t(j)] - dot), DType::bf16);
        const double pd = stored(P[j] * f[j], DType::bf16);
        for (int64_t d = 0; d < D; ++d) {
          DQ[size_t(i * D + d)] += ds * K[size_t(j * D + d)];
          DK[size_t(j * D + d)] += ds * Q[size_t(i * D + d)];
          DV[size_t(j * D + d)] += pd * G[size_t(i * D + d)];
        }
      }
    }
    store_head(dq, h, DQ);
    store_head(dk, h, DK);
    store_head(dv, h, DV);
  }
}

}  // namespace mixtrain::ref
