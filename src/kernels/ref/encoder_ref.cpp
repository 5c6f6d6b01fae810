// Scalar references of the encoder's ops (kernels/ops.h activation, kernels/ops_backward.h
// activation_backward and masked_softmax): one element at a time through the run-time dtype, at
// any strides, in fp32 (double for f64 tensors). The oracle the CPU fast paths are tested against.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops_backward.h"
#include "kernels/ref/ref_util.h"

namespace mixtrain::ref {
namespace {
using detail::elem_offset;
using detail::KahanSum;
using detail::load;
using detail::row_offset;
using detail::store;

// f(x) and f'(x) of each activation. gelu_erf: x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2)),
// gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
template <typename T>
T act(Activation k, T x) {
  switch (k) {
    case Activation::gelu_erf:
      return T(0.5) * x * (T(1) + std::erf(x * static_cast<T>(0.70710678118654752440)));
    case Activation::tanh:
      return std::tanh(x);
    case Activation::relu:
      return x > T(0) ? x : (x != x ? x : T(0));
  }
  return x;
}
template <typename T>
T act_grad(Activation k, T x) {
  switch (k) {
    case Activation::gelu_erf: {
      const T cdf = T(0.5) * (T(1) + std::erf(x * static_cast<T>(0.70710678118654752440)));
      return cdf + x * static_cast<T>(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
    }
    case Activation::tanh: {
      const T t = std::tanh(x);
      return T(1) - t * t;
    }
    case Activation::relu:
      return x > T(0) ? T(1) : T(0);
  }
  return T(1);
}

template <typename T>
void activation_t(Activation k, const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i)
    store<T>(out, elem_offset(out, i), act<T>(k, load<T>(x, elem_offset(x, i))));
}

template <typename T>
void activation_backward_t(Activation k, const Tensor& x, const Tensor& dout, Tensor& dx) {
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const T g = load<T>(dout, elem_offset(dout, i));
    store<T>(dx, elem_offset(dx, i), g * act_grad<T>(k, load<T>(x, elem_offset(x, i))));
  }
}

template <typename T>
void masked_softmax_t(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y) {
  const int64_t N = x.size(0), Tq = x.size(1), Tk = x.size(2), B = key_mask.size(0), H = N / B;
  const int64_t xs = detail::last_stride(x), ys = detail::last_stride(y);
  const T sc = static_cast<T>(scale);
  std::vector<T> row(static_cast<size_t>(Tk));
  for (int64_t r = 0; r < N * Tq; ++r) {
    const int64_t b = (r / Tq) / H;
    const auto real = [&](int64_t j) {
      return key_mask.data<int32_t>()[b * key_mask.stride(0) + j * key_mask.stride(1)] != 0;
    };
    const int64_t xb = row_offset(x, r), yb = row_offset(y, r);
    bool any = false;
    for (int64_t j = 0; j < Tk; ++j) any = any || real(j);
    if (!any) {  // every score + finfo.min rounds to finfo.min: uniform
      for (int64_t j = 0; j < Tk; ++j) store<T>(y, yb + j * ys, T(1) / static_cast<T>(Tk));
      continue;
    }
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < Tk; ++j)
      if (real(j)) m = std::max(m, sc * load<T>(x, xb + j * xs));
    KahanSum<T> sum;
    for (int64_t j = 0; j < Tk; ++j) {
      const T e = real(j) ? std::exp(sc * load<T>(x, xb + j * xs) - m) : T(0);
      row[static_cast<size_t>(j)] = e;
      sum.add(e);
    }
    // Computed in full before any store: y may be x itself.
    for (int64_t j = 0; j < Tk; ++j) store<T>(y, yb + j * ys, row[static_cast<size_t>(j)] / sum.sum);
  }
}
}  // namespace

void activation(Activation kind, const Tensor& x, Tensor& out) {
  if (detail::any_f64({&x, &out}))
    activation_t<double>(kind, x, out);
  else
    activation_t<float>(kind, x, out);
}

void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx) {
  if (detail::any_f64({&x, &dout, &dx}))
    activation_backward_t<double>(kind, x, dout, dx);
  else
    activation_backward_t<float>(kind, x, dout, dx);
}

void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y) {
  if (detail::any_f64({&x, &y}))
    masked_softmax_t<double>(x, key_mask, scale, y);
  else
    masked_softmax_t<float>(x, key_mask, scale, y);
}

}  // namespace mixtrain::ref
