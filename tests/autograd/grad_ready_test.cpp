// The grad-ready callback (autograd::GradReadyScope): called once per parameter per backward,
// when every op that used the parameter has added its contribution (data parallelism starts a
// bucket's sum from it), and never outside the scope.
#include <gtest/gtest.h>

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
    GradReadyScope scope([&](const Tensor& g) { calls.push_back({g.offset() - flat.offset(), g.to_doubles()}); });
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

}  // namespace
}  // namespace mixtrain::autograd
