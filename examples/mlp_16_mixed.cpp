// A small MLP trained with 16-mixed precision through the C++ API: fp32 master weights in the
// parameter arena, the forward pass under fp16 autocast, the dynamic loss scaler around backward
// and the optimizer step. Learns a synthetic 4-class problem; exits non-zero if it does not.
#include <cstdio>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/nn/layers.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/mixed_precision.h"

using namespace mixtrain;
using autograd::Var;

int main() {
  // Data: 512 points in 8-D; the class is the argmax of a fixed random projection to 4-D.
  const int64_t N = 512, D = 8, H = 64, K = 4;
  const Tensor x = Tensor::randn({N, D}, DType::f32, 1);
  const Tensor proj = Tensor::randn({D, K}, DType::f32, 2);
  std::vector<int32_t> labels(N);
  for (int64_t i = 0; i < N; ++i) {
    int32_t best = 0;
    double best_v = -1e30;
    for (int32_t k = 0; k < K; ++k) {
      double v = 0;
      for (int64_t d = 0; d < D; ++d) v += x.at({i, d}) * proj.at({d, k});
      if (v > best_v) best_v = v, best = k;
    }
    labels[static_cast<size_t>(i)] = best;
  }
  const Tensor y = Tensor::from_ints(labels, {N});

  // The precision mode decides the dtypes of the parameter arena (fp32 masters in 16-mixed).
  MixedPrecision mp("16-mixed");
  ParameterStore store;
  nn::Linear fc1, fc2;
  fc1.declare(store, "fc1", D, H);
  fc2.declare(store, "fc2", H, K);
  store.finalize(mp.param_dtype(), mp.grad_dtype());
  fc1.bind(store);
  fc2.bind(store);
  store.param("fc1.weight").copy_from(Tensor::randn({H, D}, DType::f32, 3, 0.f, 0.3f));
  store.param("fc2.weight").copy_from(Tensor::randn({K, H}, DType::f32, 4, 0.f, 0.1f));
  AdamW opt(store, AdamWConfig{});

  const Var input(x);
  double first = 0, last = 0;
  for (int step = 1; step <= 300; ++step) {
    store.zero_grads();
    Var loss = mp.forward([&] { return autograd::cross_entropy(fc2(autograd::gelu(fc1(input))), y); });
    mp.backward(loss);
    const StepResult r = mp.step(opt, store, 1e-2f, /*max_norm=*/1.0);
    last = loss.value().item();
    if (step == 1) first = last;
    if (step % 50 == 0 || !r.applied)
      std::printf("step %3d loss %.4f scale %.0f%s\n", step, last, r.loss_scale,
                  r.applied ? "" : " (skipped)");
  }
  std::printf("loss %.4f -> %.4f, final loss scale %.0f\n", first, last, mp.scaler().scale());
  return last < 0.3 * first ? 0 : 1;
}
