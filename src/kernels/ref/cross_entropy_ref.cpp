// Scalar reference of cross-entropy from logits: per row loss = logsumexp(x) - x[target] with the
// max subtracted before exp, Kahan sums, fp32 (double for f64); rows with target -1 are ignored.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/ref/ref_util.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {
using detail::load;

template <typename T>
double cross_entropy_t(const Tensor& logits, const Tensor& targets, Tensor* losses) {
  const int64_t R = detail::num_rows(logits), V = detail::last_dim(logits), xs = detail::last_stride(logits);
  const int32_t* tgt = static_cast<const int32_t*>(targets.raw_data());
  detail::KahanSum<T> total;
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = tgt[detail::elem_offset(targets, r)];
    T loss = 0;
    if (t != -1) {
      if (t < 0 || t >= V)
        throw ArgumentError("cross_entropy: target " + std::to_string(t) + " in row " + std::to_string(r) +
                            " is outside [0, " + std::to_string(V) + ")");
      const int64_t xb = detail::row_offset(logits, r);
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < V; ++c) m = std::max(m, load<T>(logits, xb + c * xs));
      detail::KahanSum<T> s;
      for (int64_t c = 0; c < V; ++c) s.add(std::exp(load<T>(logits, xb + c * xs) - m));
      loss = m + std::log(s.value()) - load<T>(logits, xb + t * xs);
      total.add(loss);
      ++count;
    }
    if (losses) detail::store<T>(*losses, detail::elem_offset(*losses, r), loss);
  }
  return count ? static_cast<double>(total.value() / static_cast<T>(count)) : 0.0;
}
}  // namespace

double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) {
  if (detail::any_f64({&logits, losses})) return cross_entropy_t<double>(logits, targets, losses);
  return cross_entropy_t<float>(logits, targets, losses);
}

}  // namespace mixtrain::ref
