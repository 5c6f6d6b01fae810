// MixedPrecision's working copy: from the first optimizer step on, the forward pass of a *-mixed
// mode takes its 16-bit weights from the copy the optimizer wrote (no cast, no cache entry), the
// results are bit-identical to casting the masters each time, and a copy is never used once the
// masters have changed behind the optimizer's back; it covers the arena from the first parameter
// autocast casts.
#include "mixtrain/optim/mixed_precision.h"

#include <gtest/gtest.h>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/nn/layers.h"
#include "mixtrain/optim/adamw.h"

namespace mixtrain {
namespace {

using autograd::Var;

struct Mlp {
  ParameterStore store;
  nn::Linear fc1, fc2;
  explicit Mlp(DType pd, DType gd) {
    fc1.declare(store, "fc1", 16, 32);
    fc2.declare(store, "fc2", 32, 4);
    store.finalize(pd, gd);
    fc1.bind(store);
    fc2.bind(store);
    store.param("fc1.weight").copy_from(Tensor::randn({32, 16}, DType::f32, 3, 0.f, 0.3f));
    store.param("fc2.weight").copy_from(Tensor::randn({4, 32}, DType::f32, 4, 0.f, 0.3f));
  }
  Var loss(const Var& x, const Tensor& y) const {
    return autograd::cross_entropy(fc2(autograd::gelu(fc1(x))), y);
  }
};

const Tensor kX = Tensor::randn({64, 16}, DType::f32, 1);
const Tensor kY = Tensor::from_ints(std::vector<int32_t>(64, 2), {64});

TEST(MixedPrecisionWorkingCopy, ForwardUsesTheCopyAndMatchesCastingEachTime) {
  for (const char* mode : {"bf16-mixed", "16-mixed"}) {
    MixedPrecision with(mode), without(mode);
    Mlp a(with.param_dtype(), with.grad_dtype()), b(without.param_dtype(), without.grad_dtype());
    AdamW oa(a.store), ob(b.store);
    for (int step = 1; step <= 4; ++step) {
      a.store.zero_grads();
      b.store.zero_grads();
      const AutocastCacheStats before = autocast_cache_stats();
      Var la = with.forward([&] { return a.loss(Var(kX), kY); });
      const AutocastCacheStats after = autocast_cache_stats();
      // Step 1 casts the two weights and two biases; later steps read the working copy.
      EXPECT_EQ(after.misses - before.misses, step == 1 ? 4 : 0) << mode << " step " << step;
      Var lb = without.forward([&] { return b.loss(Var(kX), kY); });
      ASSERT_EQ(la.value().item(), lb.value().item()) << mode << " step " << step;
      with.backward(la);
      without.backward(lb);
      with.step(oa, a.store, 0.01f);
      const StepResult r = without.prepare_step(b.store, 0);  // the optimizer without a copy
      ASSERT_FALSE(r.found_inf);
      ob.step(b.store, 0.01f);
      without.scaler().update(false);
      EXPECT_TRUE(with.working_copy().defined());
      EXPECT_EQ(with.working_copy().dtype(), with.spec().compute_dtype);
    }
    EXPECT_EQ(a.store.flat_params().to_floats(), b.store.flat_params().to_floats()) << mode;
  }
}

TEST(MixedPrecisionWorkingCopy, NeverUsedOnceTheMastersChanged) {
  MixedPrecision mp("bf16-mixed");
  Mlp m(mp.param_dtype(), mp.grad_dtype());
  AdamW opt(m.store);
  m.store.zero_grads();
  mp.backward(mp.forward([&] { return m.loss(Var(kX), kY); }));
  mp.step(opt, m.store, 0.01f);
  // Someone writes the masters (loading weights, an EMA...) and says so.
  Tensor w = m.store.param("fc1.weight");
  w.copy_from(Tensor::randn({32, 16}, DType::f32, 9, 0.f, 0.3f));
  m.store.flat_params().storage()->bump_version();
  const int64_t misses = autocast_cache_stats().misses;
  const double got = mp.forward([&] { return m.loss(Var(kX), kY); }).value().item();
  EXPECT_GT(autocast_cache_stats().misses, misses) << "the stale working copy was used";
  // The same value as a fresh mode that has no working copy at all.
  MixedPrecision fresh("bf16-mixed");
  EXPECT_EQ(got, fresh.forward([&] { return m.loss(Var(kX), kY); }).value().item());
  // The next step rebuilds the copy from the new masters, and forward reads it again.
  m.store.zero_grads();
  mp.backward(mp.forward([&] { return m.loss(Var(kX), kY); }));
  mp.step(opt, m.store, 0.01f);
  const int64_t misses2 = autocast_cache_stats().misses;
  const double after = mp.forward([&] { return m.loss(Var(kX), kY); }).value().item();
  EXPECT_EQ(autocast_cache_stats().misses, misses2);
  EXPECT_EQ(after, fresh.forward([&] { return m.loss(Var(kX), kY); }).value().item());
}

// An embedding table leads the arena, as in the encoder: autocast runs the lookup in fp32, so the
// working copy starts at the first linear weight and holds only what the forward casts.
struct EmbedMlp {
  ParameterStore store;
  nn::Embedding emb;
  nn::Linear fc1, fc2;
  EmbedMlp(DType pd, DType gd) {
    emb.declare(store, "emb", 50, 16);
    fc1.declare(store, "fc1", 16, 32);
    fc2.declare(store, "fc2", 32, 4);
    store.finalize(pd, gd);
    emb.bind(store);
    fc1.bind(store);
    fc2.bind(store);
    store.param("emb.weight").copy_from(Tensor::randn({50, 16}, DType::f32, 5, 0.f, 1.f));
    store.param("fc1.weight").copy_from(Tensor::randn({32, 16}, DType::f32, 3, 0.f, 0.3f));
    store.param("fc2.weight").copy_from(Tensor::randn({4, 32}, DType::f32, 4, 0.f, 0.3f));
  }
  Var loss(const Tensor& ids, const Tensor& y) const {
    return autograd::cross_entropy(fc2(autograd::gelu(fc1(emb(ids)))), y);
  }
};

TEST(MixedPrecisionWorkingCopy, StartsAtTheFirstParameterAutocastCasts) {
  std::vector<int32_t> idv(64);
  for (int i = 0; i < 64; ++i) idv[size_t(i)] = (i * 7) % 50;
  const Tensor ids = Tensor::from_ints(idv, {64});
  for (const char* mode : {"bf16-mixed", "16-mixed"}) {
    MixedPrecision with(mode), without(mode);
    EmbedMlp a(with.param_dtype(), with.grad_dtype()), b(without.param_dtype(), without.grad_dtype());
    AdamW oa(a.store), ob(b.store);
    const int64_t table = 50 * 16;
    for (int step = 1; step <= 3; ++step) {
      a.store.zero_grads();
      b.store.zero_grads();
      const int64_t misses = autocast_cache_stats().misses;
      Var la = with.forward([&] { return a.loss(ids, kY); });
      EXPECT_EQ(autocast_cache_stats().misses - misses, step == 1 ? 4 : 0) << mode << " step " << step;
      Var lb = without.forward([&] { return b.loss(ids, kY); });
      ASSERT_EQ(la.value().item(), lb.value().item()) << mode << " step " << step;
      with.backward(la);
      without.backward(lb);
      with.step(oa, a.store, 0.01f);
      ASSERT_FALSE(without.prepare_step(b.store, 0).found_inf);
      ob.step(b.store, 0.01f);
      without.scaler().update(false);
      // The copy is the arena after the table, element for element the masters rounded.
      const Tensor& copy = with.working_copy();
      ASSERT_EQ(copy.numel(), a.store.flat_params().numel() - table) << mode;
      EXPECT_EQ(copy.to_floats(), a.store.flat_params()
                                      .slice(0, table, a.store.flat_params().numel())
                                      .to(with.spec().compute_dtype)
                                      .to_floats())
          << mode << " step " << step;
    }
    EXPECT_EQ(a.store.flat_params().to_floats(), b.store.flat_params().to_floats()) << mode;
    // A later forward that casts the table (outside the copy) gets it from autocast's cache.
    const int64_t misses = autocast_cache_stats().misses;
    const double tied =
        with.forward([&] {
              return autograd::cross_entropy(
                  autograd::matmul(a.emb(ids), a.emb.weight, false, true),  // (64, 50) tied logits
                  Tensor::from_ints(std::vector<int32_t>(64, 1), {64}));
            })
            .value()
            .item();
    EXPECT_GT(autocast_cache_stats().misses, misses) << mode;
    MixedPrecision fresh(mode);
    EXPECT_EQ(tied,
              fresh
                  .forward([&] {
                    return autograd::cross_entropy(
                        autograd::matmul(a.emb(ids), a.emb.weight, false, true),  // (64, 50) tied logits
                        Tensor::from_ints(std::vector<int32_t>(64, 1), {64}));
                  })
                  .value()
                  .item())
        << mode;
  }
}

TEST(MixedPrecisionWorkingCopy, NoCopyOutsideTheMixedModes) {
  for (const char* mode : {"32-true", "bf16-true"}) {
    MixedPrecision mp(mode);
    Mlp m(mp.param_dtype(), mp.grad_dtype());
    AdamW opt(m.store);
    m.store.zero_grads();
    const Var x(kX.to(mp.param_dtype()));  // bf16-true: the inputs are 16-bit too
    mp.backward(mp.forward([&] { return m.loss(x, kY); }));
    mp.step(opt, m.store, 0.01f);
    EXPECT_FALSE(mp.working_copy().defined()) << mode;
  }
}

}  // namespace
}  // namespace mixtrain
