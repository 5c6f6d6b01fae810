// autograd's cast hook: with none installed the ops run in their inputs' dtypes; an installed hook
// is asked at the top of every op with the op's kind and inputs, may replace them, and binds the
// recompute of a checkpointed function. (amp's autocast is the real hook: tests/amp.)
#include "autograd/cast_hook.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "mixtrain/autograd/functions.h"

using namespace mixtrain;
using namespace mixtrain::autograd;

namespace {

Tensor rnd(const Shape& s, uint64_t seed) { return Tensor::rand_uniform(s, DType::f32, seed, -1.f, 1.f); }

// Records every call; casts the inputs of matmul to bf16 when asked to.
class RecordingHook final : public CastHook {
 public:
  bool on = true;
  bool cast_matmul = false;
  mutable std::vector<std::pair<OpKind, size_t>> calls;  // (op, number of inputs)
  mutable int bound = 0, recomputed = 0;

  bool active() const override { return on; }
  void cast_inputs(OpKind op, std::initializer_list<Var*> inputs) const override {
    calls.emplace_back(op, inputs.size());
    if (cast_matmul && op == OpKind::matmul)
      for (Var* v : inputs) *v = autograd::cast(*v, DType::bf16);
  }
  DType output_dtype(OpKind, DType input) const override { return input; }
  DType promote_dtype(DType a, DType) const override { return a; }
  DType compute_dtype() const override { return DType::f32; }
  std::function<Var(const Var&)> bind_state(std::function<Var(const Var&)> fn) const override {
    ++bound;
    return [this, fn = std::move(fn)](const Var& x) {
      ++recomputed;
      return fn(x);
    };
  }
};

// Installs a hook for one test and removes it after.
struct HookGuard {
  explicit HookGuard(const CastHook* h) { set_cast_hook(h); }
  ~HookGuard() { set_cast_hook(nullptr); }
};

}  // namespace

TEST(CastHook, NoneInstalledUntilSomeoneInstallsOne) {
  // This program never enters an autocast region, so nothing routes the ops anywhere.
  EXPECT_EQ(cast_hook(), nullptr);
  Var a(rnd({2, 3}, 1), true), b(rnd({3, 4}, 2), true);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
}

TEST(CastHook, EveryOpAsksWithItsKindAndInputs) {
  RecordingHook hook;
  HookGuard guard(&hook);
  EXPECT_EQ(cast_hook(), &hook);
  Var x(rnd({2, 3}, 1), true), w(rnd({4, 3}, 2), true), bias(rnd({4}, 3), true);
  Var y = gelu(linear(x, w, bias));
  (void)add(y, y);
  const std::vector<std::pair<OpKind, size_t>> want = {
      {OpKind::linear, 3}, {OpKind::gelu, 1}, {OpKind::add, 2}};
  EXPECT_EQ(hook.calls, want);

  hook.calls.clear();
  hook.on = false;  // inactive: asked nothing else
  (void)gelu(x);
  EXPECT_TRUE(hook.calls.empty());
}

TEST(CastHook, AHookThatCastsChangesTheOpAndGradientsFlowBack) {
  RecordingHook hook;
  hook.cast_matmul = true;
  HookGuard guard(&hook);
  Var a(rnd({2, 3}, 1), true), b(rnd({3, 4}, 2), true);
  Var out = matmul(a, b);
  EXPECT_EQ(out.dtype(), DType::bf16);  // the GEMM ran on the casts
  hook.on = false;
  cross_entropy(autograd::cast(out, DType::f32), Tensor::from_ints({0, 3}, {2})).backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().dtype(), DType::f32);  // the cast's backward casts back
  EXPECT_EQ(b.grad().dtype(), DType::f32);
}

TEST(CastHook, CheckpointRecomputesThroughTheBoundFunction) {
  RecordingHook hook;
  hook.on = false;
  HookGuard guard(&hook);
  Var x(rnd({2, 3}, 1), true);
  Var y = checkpoint([](const Var& in) { return gelu(in); }, x);
  EXPECT_EQ(hook.bound, 1);
  EXPECT_EQ(hook.recomputed, 0);
  cross_entropy(y, Tensor::from_ints({0, 2}, {2})).backward();
  EXPECT_EQ(hook.recomputed, 1);
  EXPECT_TRUE(x.grad().defined());
}
