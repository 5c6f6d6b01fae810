// Scalar references of the reductions. Sums use Kahan compensation in the compute type (fp32, or
// double for f64), so the reference is close to the exactly rounded result whatever the length and
// the fast kernels' blocked sums are checked against it; max propagates NaN.
#include <cmath>
#include <limits>

#include "kernels/ref/ref_util.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {
using detail::KahanSum;
using detail::load;

// Reduces n values v(i) with op.
template <typename T, typename V>
T reduce_values(int64_t n, ReduceOp op, V v) {
  if (op == ReduceOp::max) {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      const T x = v(i);
      if (std::isnan(x)) return x;
      if (x > m) m = x;
    }
    return m;
  }
  KahanSum<T> s;
  for (int64_t i = 0; i < n; ++i) {
    const T x = v(i);
    s.add(op == ReduceOp::sum_squares ? x * x : x);
  }
  if (op == ReduceOp::mean) return s.value() / static_cast<T>(n);
  return s.value();
}

template <typename T>
double reduce_t(const Tensor& x, ReduceOp op) {
  return reduce_values<T>(x.numel(), op, [&](int64_t i) { return load<T>(x, detail::elem_offset(x, i)); });
}

template <typename T>
void reduce_last_t(const Tensor& x, ReduceOp op, Tensor& out) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x), cs = detail::last_stride(x);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t base = detail::row_offset(x, r);
    const T v = reduce_values<T>(C, op, [&](int64_t c) { return load<T>(x, base + c * cs); });
    detail::store<T>(out, detail::elem_offset(out, r), v);
  }
}

template <typename T>
void sum_to_row_t(const Tensor& x, Tensor& out) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x), cs = detail::last_stride(x);
  for (int64_t c = 0; c < C; ++c) {
    KahanSum<T> s;
    for (int64_t r = 0; r < R; ++r) s.add(load<T>(x, detail::row_offset(x, r) + c * cs));
    detail::store<T>(out, c * out.stride(0), s.value());
  }
}
}  // namespace

double reduce(const Tensor& x, ReduceOp op) {
  if (op == ReduceOp::max && x.numel() == 0)
    throw ArgumentError("reduce: max of an empty tensor " + x.to_string());
  return x.dtype() == DType::f64 ? reduce_t<double>(x, op) : reduce_t<float>(x, op);
}

void reduce_last(const Tensor& x, ReduceOp op, Tensor& out) {
  if (detail::any_f64({&x, &out}))
    reduce_last_t<double>(x, op, out);
  else
    reduce_last_t<float>(x, op, out);
}

void argmax_last(const Tensor& x, Tensor& out) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x), cs = detail::last_stride(x);
  auto* o = static_cast<int32_t*>(out.raw_data());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t base = detail::row_offset(x, r);
    int64_t best = 0;
    double m = load<double>(x, base);
    for (int64_t c = 1; c < C && !std::isnan(m); ++c) {
      const double v = load<double>(x, base + c * cs);
      if (std::isnan(v) || v > m) {
        m = v;
        best = c;
      }
    }
    o[detail::elem_offset(out, r)] = static_cast<int32_t>(best);
  }
}

void sum_to_row(const Tensor& x, Tensor& out) {
  if (detail::any_f64({&x, &out}))
    sum_to_row_t<double>(x, out);
  else
    sum_to_row_t<float>(x, out);
}

}  // namespace mixtrain::ref
