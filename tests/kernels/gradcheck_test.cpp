// Finite-difference gradient checks, in double, of every differentiable op of kernels/ops.h and
// kernels/ops_backward.h: gemm (both operands and the bias, all four transposes), add (same shape
// and row broadcast), mul, scale, gelu, softmax_last, causal_softmax, layer_norm (x, weight, bias),
// embedding (weight), cross_entropy (logits), sum_to_row, reduce and reduce_last. Each check takes
// loss = sum(out * r) with a random upstream gradient r, computes the analytic gradient with the
// backward ops (for gemm, add, mul and scale: the forward ops themselves, through the chain rule;
// for the reductions: written out) and compares it with central differences. Every check runs
// twice: through the ref:: functions and through the public functions (which route f64 tensors to
// the references).
//
// Tolerance, |analytic - numeric| <= 1e-8 + 1e-6 |numeric|: central differences with h = 1e-6 have
// truncation error h^2/6 |f'''| ~ 1e-13 and rounding error ~ eps_f64 |loss| / h ~ 2e-10 |loss|; the
// losses here are O(1)-O(10), so the numeric gradient is good to ~2e-9 absolute (under atol) and
// ~1e-7 relative on the larger entries (under rtol). A wrong formula is off by O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/ops_backward.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace {

constexpr double kH = 1e-6, kRtol = 1e-6, kAtol = 1e-8;

// The ops under test, through the references (ref = true) or the public functions.
struct Api {
  bool ref;
  void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& o, const Tensor* bias) const {
    ref ? ref::gemm(a, b, c, o, bias) : mixtrain::gemm(a, b, c, o, bias);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& o) const {
    ref ? ref::add(a, b, o) : mixtrain::add(a, b, o);
  }
  void mul(const Tensor& a, const Tensor& b, Tensor& o) const {
    ref ? ref::mul(a, b, o) : mixtrain::mul(a, b, o);
  }
  void scale(const Tensor& a, float s, Tensor& o) const {
    ref ? ref::scale(a, s, o) : mixtrain::scale(a, s, o);
  }
  void gelu(const Tensor& x, Tensor& o) const { ref ? ref::gelu(x, o) : mixtrain::gelu(x, o); }
  void softmax_last(const Tensor& x, Tensor& o) const {
    ref ? ref::softmax_last(x, o) : mixtrain::softmax_last(x, o);
  }
  void sum_to_row(const Tensor& x, Tensor& o) const {
    ref ? ref::sum_to_row(x, o) : mixtrain::sum_to_row(x, o);
  }
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& o, Tensor* m,
                  Tensor* r) const {
    ref ? ref::layer_norm(x, w, b, eps, o, m, r) : mixtrain::layer_norm(x, w, b, eps, o, m, r);
  }
  void embedding(const Tensor& w, const Tensor& ids, Tensor& o) const {
    ref ? ref::embedding(w, ids, o) : mixtrain::embedding(w, ids, o);
  }
  double cross_entropy(const Tensor& l, const Tensor& t) const {
    return ref ? ref::cross_entropy(l, t, nullptr) : mixtrain::cross_entropy(l, t, nullptr);
  }
  void causal_softmax(const Tensor& x, float s, Tensor& y) const {
    ref ? ref::causal_softmax(x, s, y) : mixtrain::causal_softmax(x, s, y);
  }
  // backward
  void gelu_backward(const Tensor& x, const Tensor& d, Tensor& dx) const {
    ref ? ref::gelu_backward(x, d, dx) : mixtrain::gelu_backward(x, d, dx);
  }
  void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) const {
    ref ? ref::softmax_last_backward(y, dy, dx) : mixtrain::softmax_last_backward(y, dy, dx);
  }
  void causal_softmax_backward(const Tensor& y, const Tensor& dy, float s, Tensor& dx) const {
    ref ? ref::causal_softmax_backward(y, dy, s, dx) : mixtrain::causal_softmax_backward(y, dy, s, dx);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& m, const Tensor& r,
                           const Tensor& d, Tensor& dx, Tensor& dw, Tensor& db) const {
    ref ? ref::layer_norm_backward(x, w, m, r, d, dx, dw, db)
        : mixtrain::layer_norm_backward(x, w, m, r, d, dx, dw, db);
  }
  void embedding_backward(const Tensor& ids, const Tensor& d, Tensor& dw) const {
    ref ? ref::embedding_backward(ids, d, dw) : mixtrain::embedding_backward(ids, d, dw);
  }
  void cross_entropy_backward(const Tensor& l, const Tensor& t, float dloss, Tensor& dl) const {
    ref ? ref::cross_entropy_backward(l, t, dloss, dl) : mixtrain::cross_entropy_backward(l, t, dloss, dl);
  }
  void sum_to_row_accumulate(const Tensor& x, Tensor& o) const {
    ref ? ref::sum_to_row_accumulate(x, o) : mixtrain::sum_to_row_accumulate(x, o);
  }
  void add_inplace(Tensor& acc, const Tensor& x) const {
    ref ? ref::add_inplace(acc, x) : mixtrain::add_inplace(acc, x);
  }
};

Tensor rnd(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return Tensor::rand_uniform(s, DType::f64, seed, lo, hi);
}
Tensor zeros(const Shape& s) { return Tensor::zeros(s, DType::f64); }

// sum(out * r)
double dot(const Tensor& out, const Tensor& r) {
  const std::vector<double> a = out.to_doubles(), b = r.to_doubles();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of loss() with respect to every element of p (contiguous f64), compared with
// the analytic gradient.
void expect_gradient(const std::string& what, Tensor& p, const Tensor& analytic,
                     const std::function<double()>& loss) {
  ASSERT_EQ(p.dtype(), DType::f64) << what;
  ASSERT_EQ(analytic.dtype(), DType::f64) << what << ": the analytic gradient must be computed in f64";
  ASSERT_TRUE(p.is_contiguous()) << what;
  ASSERT_TRUE(p.shape() == analytic.shape()) << what;
  const std::vector<double> a = analytic.to_doubles();
  double* d = p.data<double>();
  double worst = 0;
  size_t worst_i = 0, bad = 0;
  std::vector<double> num(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double v = d[i];
    d[i] = v + kH;
    const double lp = loss();
    d[i] = v - kH;
    const double lm = loss();
    d[i] = v;
    num[i] = (lp - lm) / (2 * kH);
    const double ratio = std::fabs(a[i] - num[i]) / (kAtol + kRtol * std::fabs(num[i]));
    if (ratio > 1) ++bad;
    if (ratio > worst || i == 0) worst = ratio, worst_i = i;
  }
  std::ostringstream msg;
  msg << what << ": " << a.size() << " elements, worst at " << worst_i;
  if (!a.empty()) msg << " analytic=" << a[worst_i] << " numeric=" << num[worst_i];
  msg << " used " << 100 * worst << "% of budget";
  EXPECT_EQ(bad, 0u) << msg.str();
  if (std::getenv("MIXTRAIN_TEST_VERBOSE")) std::printf("  %s\n", msg.str().c_str());
}

class GradCheck : public ::testing::TestWithParam<bool> {
 protected:
  Api api{GetParam()};
};

TEST_P(GradCheck, Gemm) {
  const int64_t M = 3, N = 4, K = 5;
  const float alpha = 0.7f;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a=") + (ta ? "1" : "0") + " trans_b=" + (tb ? "1" : "0"));
      Tensor a = rnd(ta ? Shape{K, M} : Shape{M, K}, 1), b = rnd(tb ? Shape{N, K} : Shape{K, N}, 2),
             bias = rnd({N}, 3);
      const Tensor r = rnd({M, N}, 4);
      GemmOptions o;
      o.trans_a = ta;
      o.trans_b = tb;
      o.alpha = alpha;
      auto loss = [&] {
        Tensor c = zeros({M, N});
        api.gemm(a, b, c, o, &bias);
        return dot(c, r);
      };
      // dA = alpha dC op(B)^T (or its transpose), dB = alpha op(A)^T dC (or its transpose), dbias = sum_rows
      // dC.
      GemmOptions oa, ob;
      oa.alpha = ob.alpha = alpha;
      Tensor da = zeros(a.shape()), db = zeros(b.shape()), dbias = zeros({N});
      if (!ta) {
        oa.trans_b = !tb;
        api.gemm(r, b, da, oa, nullptr);
      } else {
        oa.trans_a = tb;
        oa.trans_b = true;
        api.gemm(b, r, da, oa, nullptr);
      }
      if (!tb) {
        ob.trans_a = !ta;
        api.gemm(a, r, db, ob, nullptr);
      } else {
        ob.trans_a = true;
        ob.trans_b = ta;
        api.gemm(r, a, db, ob, nullptr);
      }
      api.sum_to_row_accumulate(r, dbias);
      expect_gradient("gemm a", a, da, loss);
      expect_gradient("gemm b", b, db, loss);
      expect_gradient("gemm bias", bias, dbias, loss);
    }
}

TEST_P(GradCheck, AddSameShapeAndRowBroadcast) {
  for (bool row : {false, true}) {
    SCOPED_TRACE(row ? "row broadcast" : "same shape");
    Tensor a = rnd({3, 5}, 5), b = rnd(row ? Shape{5} : Shape{3, 5}, 6);
    const Tensor r = rnd({3, 5}, 7);
    auto loss = [&] {
      Tensor o = zeros({3, 5});
      api.add(a, b, o);
      return dot(o, r);
    };
    Tensor da = zeros({3, 5}), db = zeros(b.shape());
    api.add_inplace(da, r);
    row ? api.sum_to_row_accumulate(r, db) : api.add_inplace(db, r);
    expect_gradient("add a", a, da, loss);
    expect_gradient("add b", b, db, loss);
  }
}

TEST_P(GradCheck, MulSameShapeAndRowBroadcast) {
  for (bool row : {false, true}) {
    SCOPED_TRACE(row ? "row broadcast" : "same shape");
    Tensor a = rnd({3, 5}, 8), b = rnd(row ? Shape{5} : Shape{3, 5}, 9);
    const Tensor r = rnd({3, 5}, 10);
    auto loss = [&] {
      Tensor o = zeros({3, 5});
      api.mul(a, b, o);
      return dot(o, r);
    };
    Tensor da = zeros({3, 5}), db = zeros(b.shape()), rb = zeros({3, 5});
    api.mul(r, b, da);  // dA = r * b (b broadcast)
    api.mul(r, a, rb);  // dB = r * a, summed over rows when b is a row
    row ? api.sum_to_row_accumulate(rb, db) : api.add_inplace(db, rb);
    expect_gradient("mul a", a, da, loss);
    expect_gradient("mul b", b, db, loss);
  }
}

TEST_P(GradCheck, Scale) {
  Tensor a = rnd({4, 3}, 11);
  const Tensor r = rnd({4, 3}, 12);
  const float s = -1.75f;
  auto loss = [&] {
    Tensor o = zeros({4, 3});
    api.scale(a, s, o);
    return dot(o, r);
  };
  Tensor da = zeros({4, 3});
  api.scale(r, s, da);
  expect_gradient("scale", a, da, loss);
}

TEST_P(GradCheck, Gelu) {
  Tensor x = rnd({4, 7}, 13, -4.f, 4.f);
  const Tensor r = rnd({4, 7}, 14);
  auto loss = [&] {
    Tensor o = zeros({4, 7});
    api.gelu(x, o);
    return dot(o, r);
  };
  Tensor dx = zeros({4, 7});
  api.gelu_backward(x, r, dx);
  expect_gradient("gelu", x, dx, loss);
}

TEST_P(GradCheck, SoftmaxLast) {
  Tensor x = rnd({3, 6}, 15, -3.f, 3.f);
  const Tensor r = rnd({3, 6}, 16);
  auto loss = [&] {
    Tensor y = zeros({3, 6});
    api.softmax_last(x, y);
    return dot(y, r);
  };
  Tensor y = zeros({3, 6}), dx = zeros({3, 6});
  api.softmax_last(x, y);
  api.softmax_last_backward(y, r, dx);
  expect_gradient("softmax_last", x, dx, loss);
}

TEST_P(GradCheck, CausalSoftmax) {
  for (auto [Tq, Tk] : {std::pair<int64_t, int64_t>{4, 4}, {3, 5}}) {
    SCOPED_TRACE("Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk));
    const float scale = 0.6f;
    Tensor x = rnd({2, Tq, Tk}, 17, -3.f, 3.f);
    const Tensor r = rnd({2, Tq, Tk}, 18);
    auto loss = [&] {
      Tensor y = zeros({2, Tq, Tk});
      api.causal_softmax(x, scale, y);
      return dot(y, r);
    };
    Tensor y = zeros({2, Tq, Tk}), dx = zeros({2, Tq, Tk});
    api.causal_softmax(x, scale, y);
    api.causal_softmax_backward(y, r, scale, dx);
    expect_gradient("causal_softmax", x, dx, loss);  // masked entries: analytic 0, numeric 0
  }
}

TEST_P(GradCheck, LayerNorm) {
  const int64_t R = 3, C = 7;
  const float eps = 1e-5f;
  Tensor x = rnd({R, C}, 19, -2.f, 2.f), w = rnd({C}, 20, 0.5f, 1.5f), b = rnd({C}, 21);
  const Tensor r = rnd({R, C}, 22);
  auto loss = [&] {
    Tensor o = zeros({R, C});
    api.layer_norm(x, w, b, eps, o, nullptr, nullptr);
    return dot(o, r);
  };
  Tensor o = zeros({R, C}), mean = zeros({R}), rstd = zeros({R});
  api.layer_norm(x, w, b, eps, o, &mean, &rstd);
  Tensor dx = zeros({R, C}), dw = zeros({C}), db = zeros({C});
  api.layer_norm_backward(x, w, mean, rstd, r, dx, dw, db);
  expect_gradient("layer_norm x", x, dx, loss);
  expect_gradient("layer_norm weight", w, dw, loss);
  expect_gradient("layer_norm bias", b, db, loss);
}

TEST_P(GradCheck, Embedding) {
  const int64_t V = 5, C = 4;
  const Tensor ids = Tensor::from_ints({3, 0, 3, 4, 1, 3}, {6});
  Tensor w = rnd({V, C}, 23);
  const Tensor r = rnd({6, C}, 24);
  auto loss = [&] {
    Tensor o = zeros({6, C});
    api.embedding(w, ids, o);
    return dot(o, r);
  };
  Tensor dw = zeros({V, C});  // row 2 is never looked up: its gradient is 0
  api.embedding_backward(ids, r, dw);
  expect_gradient("embedding weight", w, dw, loss);
}

TEST_P(GradCheck, CrossEntropy) {
  const int64_t R = 5, V = 7;
  const Tensor targets = Tensor::from_ints({2, -1, 6, 0, 2}, {R});
  Tensor logits = rnd({R, V}, 25, -3.f, 3.f);
  const float r0 = 1.3f;  // the upstream gradient of the scalar loss
  auto loss = [&] { return static_cast<double>(r0) * api.cross_entropy(logits, targets); };
  Tensor dl = zeros({R, V});
  api.cross_entropy_backward(logits, targets, r0, dl);
  expect_gradient("cross_entropy logits", logits, dl, loss);
}

TEST_P(GradCheck, SumToRow) {
  Tensor x = rnd({4, 5}, 26);
  const Tensor r = rnd({5}, 27);
  auto loss = [&] {
    Tensor o = zeros({5});
    api.sum_to_row(x, o);
    return dot(o, r);
  };
  Tensor dx = zeros({4, 5});
  api.add(dx, r, dx);  // dx[i, :] = r (row broadcast)
  expect_gradient("sum_to_row", x, dx, loss);
}

// The reductions have no backward op (their gradients are broadcasts the autograd rules build from
// other ops); the analytic gradients are written out here: d sum = 1, d mean = 1/n,
// d sum_squares = 2x, d max = onehot(argmax) (random inputs: no ties).
TEST_P(GradCheck, Reductions) {
  const int64_t R = 3, C = 5;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::sum_squares, ReduceOp::max}) {
    SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)));
    Tensor x = rnd({R, C}, 28);
    const Tensor r = rnd({R}, 29);
    const double r0 = 0.8;
    auto grad = [&](int64_t n, double upstream, const std::vector<double>& row, std::vector<double>& out,
                    size_t off) {
      size_t arg = 0;
      for (size_t j = 1; j < row.size(); ++j)
        if (row[j] > row[arg]) arg = j;
      for (size_t j = 0; j < row.size(); ++j)
        out[off + j] = upstream * (op == ReduceOp::sum           ? 1.0
                                   : op == ReduceOp::mean        ? 1.0 / static_cast<double>(n)
                                   : op == ReduceOp::sum_squares ? 2.0 * row[j]
                                                                 : (j == arg ? 1.0 : 0.0));
    };
    const std::vector<double> xv = x.to_doubles(), rv = r.to_doubles();
    // reduce over every element: loss = r0 * reduce(x)
    {
      auto loss = [&] { return r0 * (api.ref ? ref::reduce(x, op) : reduce(x, op)); };
      std::vector<double> g(xv.size());
      grad(R * C, r0, xv, g, 0);
      if (op == ReduceOp::max) {  // the argmax over all elements, not per row
        std::fill(g.begin(), g.end(), 0.0);
        g[static_cast<size_t>(std::max_element(xv.begin(), xv.end()) - xv.begin())] = r0;
      }
      Tensor dx = Tensor::from_vector(g, {R, C}, DType::f64);
      expect_gradient("reduce", x, dx, loss);
    }
    // reduce over the last dim: loss = sum(reduce_last(x) * r)
    {
      auto loss = [&] {
        Tensor o = zeros({R});
        api.ref ? ref::reduce_last(x, op, o) : reduce_last(x, op, o);
        return dot(o, r);
      };
      std::vector<double> g(xv.size());
      for (int64_t i = 0; i < R; ++i)
        grad(C, rv[static_cast<size_t>(i)], std::vector<double>(xv.begin() + i * C, xv.begin() + (i + 1) * C),
             g, static_cast<size_t>(i * C));
      Tensor dx = Tensor::from_vector(g, {R, C}, DType::f64);
      expect_gradient("reduce_last", x, dx, loss);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GradCheck, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Reference" : "Public";
                         });

}  // namespace
}  // namespace mixtrain
