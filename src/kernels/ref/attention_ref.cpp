// The scalar references of heads_copy and dropout_mask (kernels/attention_ops.h): one element at
// a time through the dtype-generic accessors, written from the definitions rather than from the
// CPU kernels (which copy whole head rows and work on contiguous fp32 copies).
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
