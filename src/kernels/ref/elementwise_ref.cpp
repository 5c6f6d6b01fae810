// Scalar references of the elementwise ops (add, mul, scale, gelu): one element at a time through
// the run-time dtype, at any strides, in fp32 (double for f64 tensors).
#include <cmath>

#include "kernels/ref/ref_util.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {
using detail::elem_offset;
using detail::load;
using detail::store;

// out = f(a, b) where b has a's shape or is a row (C) broadcast over a's leading dims.
template <typename T, typename F>
void binary(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const bool row = !(b.shape() == a.shape());
  const int64_t n = a.numel();
  const int64_t C = detail::last_dim(a);
  for (int64_t i = 0; i < n; ++i) {
    const T x = load<T>(a, elem_offset(a, i));
    const T y = row ? load<T>(b, (i % C) * b.stride(0)) : load<T>(b, elem_offset(b, i));
    store<T>(out, elem_offset(out, i), f(x, y));
  }
}

template <typename T, typename F>
void unary(const Tensor& x, Tensor& out, F f) {
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) store<T>(out, elem_offset(out, i), f(load<T>(x, elem_offset(x, i))));
}

// GELU, tanh form. 0.5 x (1 + tanh(u)) is rewritten with the identity 0.5 (1 + tanh(u)) =
// 1 / (1 + exp(-2u)): the same function, but without the cancellation in 1 + tanh(u) for negative
// x (which costs ~5 bits at x = -2 in fp32).
template <typename T>
T gelu_scalar(T x) {
  const T k = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
  const T u = k * (x + static_cast<T>(0.044715) * x * x * x);
  return x / (T(1) + std::exp(T(-2) * u));
}
}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (detail::any_f64({&a, &b, &out}))
    binary<double>(a, b, out, [](double x, double y) { return x + y; });
  else
    binary<float>(a, b, out, [](float x, float y) { return x + y; });
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (detail::any_f64({&a, &b, &out}))
    binary<double>(a, b, out, [](double x, double y) { return x * y; });
  else
    binary<float>(a, b, out, [](float x, float y) { return x * y; });
}

void scale(const Tensor& a, float s, Tensor& out) {
  if (detail::any_f64({&a, &out}))
    unary<double>(a, out, [s](double x) { return static_cast<double>(s) * x; });
  else
    unary<float>(a, out, [s](float x) { return s * x; });
}

void gelu(const Tensor& x, Tensor& out) {
  if (detail::any_f64({&x, &out}))
    unary<double>(x, out, gelu_scalar<double>);
  else
    unary<float>(x, out, gelu_scalar<float>);
}

}  // namespace mixtrain::ref
