// Scalar reference of layer norm over the last dim, as torch.nn.functional.layer_norm: two passes
// (mean, then the biased variance of the centred values), eps inside the square root, fp32
// (double for f64).
#include <cmath>

#include "kernels/ref/ref_util.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {
using detail::load;
using detail::store;

template <typename T>
void layer_norm_t(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                  Tensor* mean, Tensor* rstd, Tensor* xhat) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x);
  const int64_t xs = detail::last_stride(x), os = detail::last_stride(out);
  const int64_t ws = weight.stride(0), bs = bias.stride(0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t xb = detail::row_offset(x, r), ob = detail::row_offset(out, r);
    detail::KahanSum<T> s;
    for (int64_t c = 0; c < C; ++c) s.add(load<T>(x, xb + c * xs));
    const T mu = s.value() / static_cast<T>(C);
    detail::KahanSum<T> ss;
    for (int64_t c = 0; c < C; ++c) {
      const T d = load<T>(x, xb + c * xs) - mu;
      ss.add(d * d);
    }
    const T var = ss.value() / static_cast<T>(C);
    const T rs = T(1) / std::sqrt(var + static_cast<T>(eps));
    for (int64_t c = 0; c < C; ++c) {
      const T xh = (load<T>(x, xb + c * xs) - mu) * rs;
      store<T>(out, ob + c * os, xh * load<T>(weight, c * ws) + load<T>(bias, c * bs));
      if (xhat) store<T>(*xhat, detail::row_offset(*xhat, r) + c * detail::last_stride(*xhat), xh);
    }
    if (mean) store<T>(*mean, detail::elem_offset(*mean, r), mu);
    if (rstd) store<T>(*rstd, detail::elem_offset(*rstd, r), rs);
  }
}
}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                Tensor* mean, Tensor* rstd, Tensor* xhat) {
  if (detail::any_f64({&x, &weight, &bias, &out, mean, rstd, xhat}))
    layer_norm_t<double>(x, weight, bias, eps, out, mean, rstd, xhat);
  else
    layer_norm_t<float>(x, weight, bias, eps, out, mean, rstd, xhat);
}

}  // namespace mixtrain::ref
