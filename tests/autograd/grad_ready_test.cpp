// The grad-ready callback (autograd::GradReadyScope): called once per parameter per backward,
// when every op that used the parameter has added its contribution (data parallelism starts a
// bucket's sum from it), and never outside the scope. FreshGradScope: gradients made apart and
// added when final.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/autograd/variable.h"

namespace mixtrain::autograd {
namespace {

TEST(GradReady, EachParameterOnceWithItsFinalGradient) {
  // p is used by two ops (like tied embeddings), q by one: (1, 3) logits = (p + p) * q.
  Tensor flat = Tensor::zeros({32}, DType::f32);
  Tensor gp = flat.slice(0, 0, 3).reshape({1, 3}), gq = flat.slice(0, 16, 19).reshape({1, 3});
  Var p = Var::parameter(Tensor::from_vector({0.5, -1, 2}, {1, 3}, DType::f32), gp);
  Var q = Var::parameter(Tensor::from_vector({1, 2, 3}, {1, 3}, DType::f32), gq);
  struct Call {
    int64_t offset;
    std::vector<double> grad;
  };
  std::vector<Call> calls;
  {
    GradReadyScope scope([&](const Tensor& g) {
      calls.push_back({g.offset() - flat.offset(), g.to_doubles()});
    });
    cross_entropy(mul(add(p, p), q), Tensor::from_ints({1}, {1})).backward();
  }
  ASSERT_EQ(calls.size(), 2u);
  for (const Call& c : calls) {
    const Tensor& final_grad = c.offset == 0 ? gp : gq;
    EXPECT_TRUE(c.offset == 0 || c.offset == 16) << c.offset;
    EXPECT_EQ(c.grad, final_grad.to_doubles()) << "reported before its last contribution";
  }
  EXPECT_NE(calls[0].offset, calls[1].offset);
  EXPECT_NE(gp.to_doubles()[0], 0.0);
  // Outside the scope: no calls.
  cross_entropy(mul(add(p, p), q), Tensor::from_ints({1}, {1})).backward();
  EXPECT_EQ(calls.size(), 2u);
}

// FreshGradScope: a second backward's gradients are made from zeros and added to the buffers once
// final, before the grad-ready callback sees them: buffer = fl(first + second), bit for bit the
// sum of two separate passes (what a sum over data-parallel ranks gives), where a second backward
// without it adds inside the kernels. A linear layer (GEMM with beta = 1 and column sums) with a
// weight used twice, so a parameter gets two contributions in one pass.
TEST(FreshGrad, SecondPassAddsItsOwnGradientWhenFinal) {
  const Tensor x1 = Tensor::randn({5, 7}, DType::f32, 11), x2 = Tensor::randn({5, 7}, DType::f32, 12);
  const Tensor w0 = Tensor::randn({4, 7}, DType::f32, 13), b0 = Tensor::randn({4}, DType::f32, 14);
  struct Model {
    Tensor flat = Tensor::zeros({64}, DType::f32);
    Var w, b;
    Model(const Tensor& w0, const Tensor& b0) {
      w = Var::parameter(w0.clone(), flat.slice(0, 0, 28).reshape({4, 7}));
      b = Var::parameter(b0.clone(), flat.slice(0, 32, 36).reshape({4}));
    }
    void backward(const Tensor& x) {
      const Var xv(x, false);
      cross_entropy(add(linear(xv, w, b), linear(xv, w, b)), Tensor::from_ints({0, 1, 2, 3, 1}, {5}))
          .backward();
    }
  };
  Model a(w0, b0), b(w0, b0), fused(w0, b0);
  a.backward(x1);  // the two passes apart
  b.backward(x2);
  fused.backward(x1);
  Model exact(w0, b0);
  exact.backward(x1);
  std::vector<std::vector<double>> seen;
  {
    GradReadyScope ready([&](const Tensor& g) { seen.push_back(g.to_doubles()); });
    FreshGradScope fresh;
    exact.backward(x2);
  }
  fused.backward(x2);
  const std::vector<double> ga = a.flat.to_doubles(), gb = b.flat.to_doubles(), ge = exact.flat.to_doubles();
  for (size_t i = 0; i < ga.size(); ++i)
    EXPECT_EQ(ge[i], double(float(ga[i]) + float(gb[i]))) << "element " << i;
  // Each parameter reported once, with its sum (the scope's callback saw the buffers after the add).
  ASSERT_EQ(seen.size(), 2u);
  for (const std::vector<double>& g : seen) {
    const bool is_w = g.size() == 28;
    const std::vector<double> want =
        is_w ? exact.flat.slice(0, 0, 28).to_doubles() : exact.flat.slice(0, 32, 36).to_doubles();
    EXPECT_EQ(g, want);
  }
  // The fused second pass is close to the exact one, and the scope is what made the difference
  // (not asserted equal or unequal bit for bit: on some shapes the two agree).
  const std::vector<double> gf = fused.flat.to_doubles();
  for (size_t i = 0; i < gf.size(); ++i) EXPECT_NEAR(gf[i], ge[i], 1e-5 * (1 + std::abs(ge[i])));
}

// GradHandoffScope (ZeRO-2): each parameter's gradient is made apart (in the tensor place() gives,
// or a new one), handed over once final with the parameter's buffer view, and the buffer is never
// written: the handed gradients are bit for bit what a plain backward accumulates in the buffers.
TEST(GradHandoff, HandsEachFinalGradientOverAndLeavesTheBuffersAlone) {
  const Tensor x = Tensor::randn({5, 7}, DType::f32, 21);
  const Tensor w0 = Tensor::randn({4, 7}, DType::f32, 22), b0 = Tensor::randn({4}, DType::f32, 23);
  auto run = [&](Tensor flat) {
    const Var w = Var::parameter(w0.clone(), flat.slice(0, 0, 28).reshape({4, 7}));
    const Var b = Var::parameter(b0.clone(), flat.slice(0, 32, 36).reshape({4}));
    const Var xv(x, false);
    cross_entropy(add(linear(xv, w, b), linear(xv, w, b)), Tensor::from_ints({0, 1, 2, 3, 1}, {5}))
        .backward();
  };
  Tensor plain = Tensor::zeros({64}, DType::f32);
  run(plain);
  Tensor flat = Tensor::zeros({64}, DType::f32);
  Tensor placed = Tensor::zeros({28}, DType::f32);  // where w's gradient is to go; b's: a new tensor
  std::vector<std::pair<int64_t, Tensor>> handed;
  int places = 0;
  {
    GradHandoffScope scope({[&](const Tensor& buffer) {
                              ++places;
                              return buffer.numel() == 28 ? placed.reshape({4, 7}) : Tensor();
                            },
                            [&](const Tensor& buffer, Tensor g) {
                              handed.push_back({buffer.offset(), g});
                            }});
    run(flat);
  }
  EXPECT_EQ(places, 2);  // once per parameter, at its first contribution
  ASSERT_EQ(handed.size(), 2u);
  for (const auto& [offset, g] : handed) {
    ASSERT_TRUE(offset == 0 || offset == 32) << offset;
    const Tensor want = offset == 0 ? plain.slice(0, 0, 28) : plain.slice(0, 32, 36);
    EXPECT_EQ(g.reshape({g.numel()}).to_doubles(), want.to_doubles());
    if (offset == 0) {
      EXPECT_EQ(g.storage(), placed.storage()) << "w's gradient not made in its place";
    }
  }
  for (double v : flat.to_doubles()) EXPECT_EQ(v, 0.0) << "the buffer was written";
  // Outside the scope: the buffers again.
  run(flat);
  EXPECT_EQ(flat.to_doubles(), plain.to_doubles());
}

TEST(FreshGrad, ScopesDoNotNest) {
  FreshGradScope outer;
  EXPECT_THROW(FreshGradScope inner, ArgumentError);
}

}  // namespace
}  // namespace mixtrain::autograd
