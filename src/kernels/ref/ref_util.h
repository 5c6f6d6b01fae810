// Helpers for the scalar references (ref/*_ref.cpp): element access through the run-time dtype at
// any strides, in the compute type T (float, or double when the tensors are f64), and a Kahan sum.
// Slow on purpose: these are the oracle the fast kernels are checked against.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain::ref::detail {

// f64 tensors are computed in double (finite-difference gradient checks), everything else in fp32.
inline bool any_f64(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && t->defined() && t->dtype() == DType::f64) return true;
  return false;
}

// Element offset (in elements, from raw_data()) of the i-th element in row-major order.
inline int64_t elem_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    const int64_t n = t.size(d);
    off += (i % n) * t.stride(d);
    i /= n;
  }
  return off;
}

// x (..., C): offset of the first element of row r (rows are the leading dims flattened).
inline int64_t row_offset(const Tensor& x, int64_t r) {
  int64_t off = 0;
  for (int d = x.dim() - 2; d >= 0; --d) {
    const int64_t n = x.size(d);
    off += (r % n) * x.stride(d);
    r /= n;
  }
  return off;
}

inline int64_t num_rows(const Tensor& x) {
  return x.dim() == 0 ? 1 : x.numel() / std::max<int64_t>(x.size(-1), 1);
}
inline int64_t last_dim(const Tensor& x) { return x.dim() == 0 ? 1 : x.size(-1); }
inline int64_t last_stride(const Tensor& x) { return x.dim() == 0 ? 1 : x.stride(-1); }

template <typename T>
T load(const Tensor& t, int64_t off) {
  if constexpr (sizeof(T) == 8)
    return load_as_f64(t.raw_data(), t.dtype(), off);
  else
    return load_as_f32(t.raw_data(), t.dtype(), off);
}

template <typename T>
void store(const Tensor& t, int64_t off, T v) {
  if constexpr (sizeof(T) == 8)
    store_from_f64(t.raw_data(), t.dtype(), off, v);
  else
    store_from_f32(t.raw_data(), t.dtype(), off, v);
}

// Kahan-compensated running sum: the reference sums are (nearly) independent of summation order,
// so the fast kernels' blocked/pairwise sums are checked against the correctly rounded value
// rather than against another arbitrary order. `sum` is the running result.
template <typename T>
struct KahanSum {
  T sum = 0;
  T comp = 0;
  void add(T v) {
    const T y = v - comp;
    const T t = sum + y;
    if (std::isinf(t) || std::isnan(t)) {  // (inf - inf) would poison the compensation
      sum = t;
      comp = 0;
      return;
    }
    comp = (t - sum) - y;
    sum = t;
  }
  T value() const { return sum; }
};

}  // namespace mixtrain::ref::detail
