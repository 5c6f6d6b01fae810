// Scalar references of the backward ops (kernels/ops_backward.h) and the causal softmax: one
// element at a time through the run-time dtype, at any strides, in the compute type T (fp32, or
// double when any tensor is f64), with Kahan sums. Slow and obvious on purpose: the oracle.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/ops_backward.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/error.h"

namespace mixtrain::ref {
namespace {
using detail::elem_offset;
using detail::KahanSum;
using detail::load;
using detail::row_offset;
using detail::store;

// ---- gelu ------------------------------------------------------------------------------------
// d/dx [x s(x)] with s = 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), u = k (x + a x^3):
//   gelu'(x) = s + x * 0.5 (1 - tanh^2 u) * du/dx = s + 2 x s (1 - s) k (1 + 3 a x^2)
// (1 - tanh^2 u = 4 s (1 - s)); no cancellation for negative x, as in the forward.
template <typename T>
T gelu_grad(T x) {
  const T k = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
  const T a = static_cast<T>(0.044715);
  const T u = k * (x + a * x * x * x);
  const T e = std::exp(T(-2) * u);
  const T s = T(1) / (T(1) + e);
  const T one_minus_s = std::isinf(e) ? T(1) : e / (T(1) + e);
  return s + T(2) * x * s * one_minus_s * k * (T(1) + T(3) * a * x * x);
}

template <typename T>
void gelu_backward_t(const Tensor& x, const Tensor& dout, Tensor& dx) {
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const T v = load<T>(x, elem_offset(x, i));
    const T g = load<T>(dout, elem_offset(dout, i));
    store<T>(dx, elem_offset(dx, i), g * gelu_grad(v));
  }
}

// ---- softmax family ----------------------------------------------------------------------------
// The number of keys row r of a (..., Tq, Tk) tensor attends to (all of them when not causal).
inline int64_t allowed(int64_t r, int64_t Tq, int64_t Tk, bool causal) {
  return causal ? (r % Tq) + (Tk - Tq) + 1 : Tk;
}

template <typename T>
void causal_softmax_t(const Tensor& x, float scale, Tensor& y) {
  const int64_t R = detail::num_rows(x), Tk = detail::last_dim(x), Tq = x.size(-2);
  const int64_t xs = detail::last_stride(x), ys = detail::last_stride(y);
  const T sc = static_cast<T>(scale);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t xb = row_offset(x, r), yb = row_offset(y, r);
    const int64_t n = allowed(r, Tq, Tk, true);
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, sc * load<T>(x, xb + j * xs));
    KahanSum<T> sum;
    for (int64_t j = 0; j < n; ++j) sum.add(std::exp(sc * load<T>(x, xb + j * xs) - m));
    // Computed in full before any store: y may be x itself.
    std::vector<T> row(static_cast<size_t>(Tk), T(0));
    for (int64_t j = 0; j < n; ++j)
      row[static_cast<size_t>(j)] = std::exp(sc * load<T>(x, xb + j * xs) - m) / sum.sum;
    for (int64_t j = 0; j < Tk; ++j) store<T>(y, yb + j * ys, row[static_cast<size_t>(j)]);
  }
}

// dx = scale * y * (dy - sum_j dy_j y_j) over the first n(r) columns of each row, 0 after them.
template <typename T>
void softmax_backward_t(const Tensor& y, const Tensor& dy, T scale, bool causal, Tensor& dx) {
  const int64_t R = detail::num_rows(y), C = detail::last_dim(y);
  const int64_t Tq = causal ? y.size(-2) : 1;
  const int64_t ys = detail::last_stride(y), gs = detail::last_stride(dy), xs = detail::last_stride(dx);
  std::vector<T> row(static_cast<size_t>(C));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t yb = row_offset(y, r), gb = row_offset(dy, r), xb = row_offset(dx, r);
    const int64_t n = allowed(r, Tq, C, causal);
    KahanSum<T> dot;
    for (int64_t j = 0; j < n; ++j) dot.add(load<T>(dy, gb + j * gs) * load<T>(y, yb + j * ys));
    for (int64_t j = 0; j < C; ++j)
      row[static_cast<size_t>(j)] =
          j < n ? scale * load<T>(y, yb + j * ys) * (load<T>(dy, gb + j * gs) - dot.sum) : T(0);
    for (int64_t j = 0; j < C; ++j) store<T>(dx, xb + j * xs, row[static_cast<size_t>(j)]);
  }
}

// ---- layer norm --------------------------------------------------------------------------------
template <typename T>
void layer_norm_backward_t(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                           const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x);
  const int64_t xs = detail::last_stride(x), gs = detail::last_stride(dout), os = detail::last_stride(dx);
  std::vector<KahanSum<T>> dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  std::vector<T> xhat(static_cast<size_t>(C)), g(static_cast<size_t>(C));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t xb = row_offset(x, r), gb = row_offset(dout, r), ob = row_offset(dx, r);
    const bool normalized = !mean.defined();  // x holds x-hat already
    const T mu = normalized ? T(0) : load<T>(mean, elem_offset(mean, r)),
            rs = load<T>(rstd, elem_offset(rstd, r));
    KahanSum<T> sum_g, sum_gx;
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = static_cast<size_t>(c);
      const T d = load<T>(dout, gb + c * gs);
      xhat[k] = normalized ? load<T>(x, xb + c * xs) : (load<T>(x, xb + c * xs) - mu) * rs;
      g[k] = d * load<T>(weight, c * weight.stride(0));
      sum_g.add(g[k]);
      sum_gx.add(g[k] * xhat[k]);
      dw[k].add(d * xhat[k]);
      db[k].add(d);
    }
    const T mean_g = sum_g.sum / static_cast<T>(C), mean_gx = sum_gx.sum / static_cast<T>(C);
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = static_cast<size_t>(c);
      store<T>(dx, ob + c * os, rs * (g[k] - mean_g - xhat[k] * mean_gx));
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    const size_t k = static_cast<size_t>(c);
    const int64_t wo = c * dweight.stride(0), bo = c * dbias.stride(0);
    store<T>(dweight, wo, load<T>(dweight, wo) + dw[k].sum);
    store<T>(dbias, bo, load<T>(dbias, bo) + db[k].sum);
  }
}

// ---- embedding -----------------------------------------------------------------------------------
template <typename T>
void embedding_backward_t(const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  const int64_t V = dweight.size(0), C = dweight.size(1), R = ids.numel();
  const int32_t* id = static_cast<const int32_t*>(ids.raw_data());
  std::vector<int32_t> v(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    v[static_cast<size_t>(r)] = id[elem_offset(ids, r)];
    if (v[static_cast<size_t>(r)] < 0 || v[static_cast<size_t>(r)] >= V)
      throw ArgumentError("embedding_backward: id " + std::to_string(v[static_cast<size_t>(r)]) +
                          " at position " + std::to_string(r) + " is outside [0, " + std::to_string(V) + ")");
  }
  // Positions grouped by id, each group in row order; every touched dweight row is rounded once.
  std::vector<int64_t> order(static_cast<size_t>(R));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return v[static_cast<size_t>(a)] < v[static_cast<size_t>(b)];
  });
  const int64_t gs = detail::last_stride(dout), ws0 = dweight.stride(0), ws1 = dweight.stride(1);
  std::vector<KahanSum<T>> acc(static_cast<size_t>(C));
  for (int64_t i = 0; i < R;) {
    const int32_t id_i = v[static_cast<size_t>(order[static_cast<size_t>(i)])];
    std::fill(acc.begin(), acc.end(), KahanSum<T>{});
    for (; i < R && v[static_cast<size_t>(order[static_cast<size_t>(i)])] == id_i; ++i) {
      const int64_t gb = row_offset(dout, order[static_cast<size_t>(i)]);
      for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)].add(load<T>(dout, gb + c * gs));
    }
    for (int64_t c = 0; c < C; ++c) {
      const int64_t o = id_i * ws0 + c * ws1;
      store<T>(dweight, o, load<T>(dweight, o) + acc[static_cast<size_t>(c)].sum);
    }
  }
}

// ---- cross-entropy -------------------------------------------------------------------------------
template <typename T>
void cross_entropy_backward_t(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits) {
  const int64_t R = detail::num_rows(logits), V = detail::last_dim(logits);
  const int64_t xs = detail::last_stride(logits), os = detail::last_stride(dlogits);
  const int32_t* tgt = static_cast<const int32_t*>(targets.raw_data());
  int64_t n_valid = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = tgt[elem_offset(targets, r)];
    if (t == -1) continue;
    if (t < 0 || t >= V)
      throw ArgumentError("cross_entropy_backward: target " + std::to_string(t) + " in row " +
                          std::to_string(r) + " is outside [0, " + std::to_string(V) + ")");
    ++n_valid;
  }
  const T coef = n_valid ? static_cast<T>(dloss) / static_cast<T>(n_valid) : T(0);
  std::vector<T> row(static_cast<size_t>(V));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = tgt[elem_offset(targets, r)];
    const int64_t xb = row_offset(logits, r), ob = row_offset(dlogits, r);
    if (t == -1) {
      std::fill(row.begin(), row.end(), T(0));
    } else {
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < V; ++c) m = std::max(m, load<T>(logits, xb + c * xs));
      KahanSum<T> sum;
      for (int64_t c = 0; c < V; ++c) sum.add(std::exp(load<T>(logits, xb + c * xs) - m));
      for (int64_t c = 0; c < V; ++c) {
        const T p = std::exp(load<T>(logits, xb + c * xs) - m) / sum.sum;
        row[static_cast<size_t>(c)] = coef * (p - (c == t ? T(1) : T(0)));
      }
    }
    for (int64_t c = 0; c < V; ++c) store<T>(dlogits, ob + c * os, row[static_cast<size_t>(c)]);
  }
}

// ---- accumulation --------------------------------------------------------------------------------
template <typename T>
void sum_to_row_accumulate_t(const Tensor& x, Tensor& out) {
  const int64_t R = detail::num_rows(x), C = detail::last_dim(x), xs = detail::last_stride(x);
  std::vector<KahanSum<T>> acc(static_cast<size_t>(C));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t xb = row_offset(x, r);
    for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)].add(load<T>(x, xb + c * xs));
  }
  for (int64_t c = 0; c < C; ++c) {
    const int64_t o = c * out.stride(0);
    store<T>(out, o, load<T>(out, o) + acc[static_cast<size_t>(c)].sum);
  }
}

template <typename T>
void add_inplace_t(Tensor& acc, const Tensor& x) {
  const int64_t n = acc.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t o = elem_offset(acc, i);
    store<T>(acc, o, load<T>(acc, o) + load<T>(x, elem_offset(x, i)));
  }
}
}  // namespace

void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  if (detail::any_f64({&x, &dout, &dx}))
    gelu_backward_t<double>(x, dout, dx);
  else
    gelu_backward_t<float>(x, dout, dx);
}

void causal_softmax(const Tensor& x, float scale, Tensor& y) {
  if (detail::any_f64({&x, &y}))
    causal_softmax_t<double>(x, scale, y);
  else
    causal_softmax_t<float>(x, scale, y);
}

void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) {
  if (detail::any_f64({&y, &dy, &dx}))
    softmax_backward_t<double>(y, dy, static_cast<double>(scale), true, dx);
  else
    softmax_backward_t<float>(y, dy, scale, true, dx);
}

void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (detail::any_f64({&y, &dy, &dx}))
    softmax_backward_t<double>(y, dy, 1.0, false, dx);
  else
    softmax_backward_t<float>(y, dy, 1.f, false, dx);
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  if (detail::any_f64({&x, &weight, &mean, &rstd, &dout, &dx, &dweight, &dbias}))
    layer_norm_backward_t<double>(x, weight, mean, rstd, dout, dx, dweight, dbias);
  else
    layer_norm_backward_t<float>(x, weight, mean, rstd, dout, dx, dweight, dbias);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  if (detail::any_f64({&dout, &dweight}))
    embedding_backward_t<double>(ids, dout, dweight);
  else
    embedding_backward_t<float>(ids, dout, dweight);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits) {
  if (detail::any_f64({&logits, &dlogits}))
    cross_entropy_backward_t<double>(logits, targets, dloss, dlogits);
  else
    cross_entropy_backward_t<float>(logits, targets, dloss, dlogits);
}

void sum_to_row_accumulate(const Tensor& x, Tensor& out) {
  if (detail::any_f64({&x, &out}))
    sum_to_row_accumulate_t<double>(x, out);
  else
    sum_to_row_accumulate_t<float>(x, out);
}

void add_inplace(Tensor& acc, const Tensor& x) {
  if (detail::any_f64({&acc, &x}))
    add_inplace_t<double>(acc, x);
  else
    add_inplace_t<float>(acc, x);
}

}  // namespace mixtrain::ref
