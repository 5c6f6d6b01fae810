// Scalar reference of softmax over the last dim: max-subtracted, Kahan-summed denominator, fp32
// (double for f64).
#include <cmath>
#include <limits>

#include "kernels/ref/ref_util.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {
using detail::load;
using detail::store;

template <typename T>
void softmax_t(const Tensor& x, Tensor& out) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x);
  const int64_t xs = detail::last_stride(x), os = detail::last_stride(out);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t xb = detail::row_offset(x, r), ob = detail::row_offset(out, r);
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < C; ++c) m = std::max(m, load<T>(x, xb + c * xs));
    detail::KahanSum<T> sum;
    for (int64_t c = 0; c < C; ++c) sum.add(std::exp(load<T>(x, xb + c * xs) - m));
    for (int64_t c = 0; c < C; ++c)
      store<T>(out, ob + c * os, std::exp(load<T>(x, xb + c * xs) - m) / sum.value());
  }
}
}  // namespace

void softmax_last(const Tensor& x, Tensor& out) {
  if (detail::any_f64({&x, &out}))
    softmax_t<double>(x, out);
  else
    softmax_t<float>(x, out);
}

}  // namespace mixtrain::ref
