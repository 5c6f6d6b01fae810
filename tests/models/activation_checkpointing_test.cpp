// Activation checkpointing (autograd::checkpoint, Gpt::set_activation_checkpointing): the same
// loss and the same gradients bit for bit as the ordinary graph, in fp32 and under bf16/fp16
// autocast, with dropout on (the recomputation draws the same masks); and less kept for backward.
#include <gtest/gtest.h>

#include <cstring>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/optim/mixed_precision.h"

namespace mixtrain {
namespace {

GptConfig small_config(float dropout) {
  GptConfig c;
  c.vocab_size = 64, c.block_size = 32, c.n_layer = 3, c.n_head = 2, c.n_embd = 32, c.dropout = dropout;
  return c;
}

struct Result {
  double loss;
  std::vector<float> grads;
  int64_t peak_activations;
};

Result run(const char* precision, bool checkpointing, float dropout) {
  MixedPrecision mp(precision);
  Gpt model(small_config(dropout), 7, mp.param_dtype(), mp.grad_dtype());
  model.set_activation_checkpointing(checkpointing);
  std::vector<int32_t> ids(4 * 32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % 64);
  const Tensor idx = Tensor::from_ints(ids, {4, 32});
  model.params().zero_grads();
  MemoryTracker::global().reset_peaks();
  const size_t act = static_cast<size_t>(MemCategory::activations);
  const int64_t before = MemoryTracker::global().snapshot().live[act];
  autograd::Var loss =
      mp.forward([&] { return model.forward(idx, &idx, /*training=*/true, /*dropout_seed=*/99).loss; });
  const int64_t kept = MemoryTracker::global().snapshot().live[act] - before;
  mp.backward(loss);
  return {loss.value().item(), model.params().flat_grads().to_floats(), kept};
}

TEST(ActivationCheckpointing, SameLossAndGradientsBitForBit) {
  for (const char* precision : {"32-true", "bf16-mixed", "16-mixed", "bf16-true"})
    for (float dropout : {0.f, 0.1f}) {
      const Result plain = run(precision, false, dropout), ckpt = run(precision, true, dropout);
      EXPECT_EQ(plain.loss, ckpt.loss) << precision << " dropout " << dropout;
      ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
      size_t differ = 0;
      for (size_t i = 0; i < plain.grads.size(); ++i)
        if (std::memcmp(&plain.grads[i], &ckpt.grads[i], sizeof(float)) != 0) ++differ;
      EXPECT_EQ(differ, 0u) << precision << " dropout " << dropout << ": gradients differ";
      // What forward leaves for backward: the block inputs instead of every block's activations.
      EXPECT_LT(ckpt.peak_activations * 2, plain.peak_activations) << precision;
    }
}

TEST(ActivationCheckpointing, InputGradientMatchesAndWithoutGradNothingIsRecorded) {
  using autograd::Var;
  Var x(Tensor::randn({8, 16}, DType::f32, 1), true), w(Tensor::randn({16, 16}, DType::f32, 2), true);
  auto f = [&](const Var& in) { return autograd::gelu(autograd::matmul(in, w)); };
  const Tensor t = Tensor::from_ints({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  autograd::cross_entropy(f(x), t).backward();
  const std::vector<float> gx = x.grad().to_floats(), gw = w.grad().to_floats();
  x.impl()->grad = Tensor();
  w.impl()->grad = Tensor();
  autograd::cross_entropy(autograd::checkpoint(f, x), t).backward();
  EXPECT_EQ(x.grad().to_floats(), gx);
  EXPECT_EQ(w.grad().to_floats(), gw);
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(autograd::checkpoint(f, x).impl()->grad_fn, nullptr);
}

}  // namespace
}  // namespace mixtrain
