// The scalar references of heads_copy and dropout_mask (kernels/attention_ops.h): one element at
// a time through the dtype-generic accessors, written from the definitions rather than from the
// CPU kernels (which copy whole head rows and work on contiguous fp32 copies).
#include "kernels/attention_ops.h"
#include "kernels/ops_backward.h"
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
  const auto threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
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
// A GEMM input as the fused op multiplies it: f32 rounded to bf16 (matmul precision medium), bf16 as is.
Tensor gemm_input(const Tensor& t) {
  return t.dtype() == DType::f32 ? t.to(DType::bf16, MemCategory::workspace) : t;
}
}  // namespace

void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y) {
  const int64_t n = q.size(0), T = q.size(1);
  Tensor s = Tensor::empty({n, T, T}, DType::f32, MemCategory::workspace);
  GemmOptions nt;
  nt.trans_b = true;
  ref::gemm(gemm_input(q), gemm_input(k), s, nt, nullptr);
  ref::causal_softmax(s, scale, probs);
  ref::gemm(gemm_input(probs), gemm_input(v), y, {}, nullptr);
}

void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t n = q.size(0), T = q.size(1);
  GemmOptions nt, tn;
  nt.trans_b = true;
  tn.trans_a = true;
  const Tensor pi = gemm_input(probs), gi = gemm_input(g);
  if (dv.defined()) ref::gemm(pi, gi, dv, tn, nullptr);
  if (!dq.defined()) return;
  Tensor dp = Tensor::empty({n, T, T}, DType::f32, MemCategory::workspace);
  ref::gemm(gi, gemm_input(v), dp, nt, nullptr);
  Tensor ds = Tensor::empty({n, T, T}, DType::bf16, MemCategory::workspace);
  ref::causal_softmax_backward(probs, dp, scale, ds);
  ref::gemm(ds, gemm_input(k), dq, {}, nullptr);
  ref::gemm(ds, gemm_input(q), dk, tn, nullptr);
}

}  // namespace mixtrain::ref
