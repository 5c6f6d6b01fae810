// Throughput of the row ops around the GEMMs of a bf16-mixed training step (issue 32, item 5), at
// gpt-mini's shapes (16 x 256 tokens; C = 384, the MLP's 4C = 1536): GELU (tanh form) forward and
// backward on the MLP's bf16 activations, layer norm forward and backward on the fp32 residual
// stream, the residual add (fp32 + bf16 -> fp32). Beside them a bf16 copy of the same rows (what an
// op must at least move). bytes_per_second counts the bytes each op must read and write once, so a
// row's ratio to the copy's is how far it is from the bandwidth it needs. portable:1 runs the
// portable loops instead of the AVX-512 intrinsics (kernels/cpu/simd_forms.h), as a CPU without
// AVX-512 would; the two forms alternate within one run.
//   build/bench/row_ops_bench --benchmark_min_time=0.2 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include "kernels/cpu/simd_forms.h"
#include "kernels/ops_backward.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {
namespace {

constexpr int64_t kRows = 16 * 256;

struct Form {  // the portable loops (1) or the AVX-512 intrinsics (0) for one benchmark
  explicit Form(int64_t portable) { cpu::set_portable_forms_only(portable != 0); }
  ~Form() { cpu::set_portable_forms_only(false); }
};

void report(benchmark::State& state, int64_t bytes) {
  state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
}

// args: columns, portable
void BM_Bf16Copy(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Tensor x = Tensor::randn({kRows, C}, DType::bf16, 1);
  Tensor y = Tensor::empty({kRows, C}, DType::bf16);
  for (auto _ : state) {
    y.copy_from(x);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 4);
}

void BM_GeluForward(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::bf16, 1);
  Tensor y = Tensor::empty({kRows, C}, DType::bf16);
  for (auto _ : state) {
    gelu(x, y);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 4);
}

void BM_GeluBackward(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::bf16, 1), g = Tensor::randn({kRows, C}, DType::bf16, 2);
  Tensor dx = Tensor::empty({kRows, C}, DType::bf16);
  for (auto _ : state) {
    gelu_backward(x, g, dx);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 6);
}

// The encoders' GELU (erf form), forward and backward, on the same bf16 rows.
void BM_GeluErfForward(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::bf16, 1);
  Tensor y = Tensor::empty({kRows, C}, DType::bf16);
  for (auto _ : state) {
    activation(Activation::gelu_erf, x, y);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 4);
}

void BM_GeluErfBackward(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::bf16, 1), g = Tensor::randn({kRows, C}, DType::bf16, 2);
  Tensor dx = Tensor::empty({kRows, C}, DType::bf16);
  for (auto _ : state) {
    activation_backward(Activation::gelu_erf, x, g, dx);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 6);
}

// The encoders' attention softmax with a key mask (kernels/ops_backward.h masked_softmax) at the
// MiniLM evaluation's shape: batch 64, 12 heads, 128 x 128 fp32 scores, a third of the keys
// padding in half the rows of the batch, bf16 probabilities out. Bytes: the scores read, the
// probabilities written.
void BM_MaskedSoftmax(benchmark::State& state) {
  constexpr int64_t B = 64, H = 12, T = 128;
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({B * H, T, T}, DType::f32, 1);
  std::vector<int32_t> m(static_cast<size_t>(B * T), 1);
  for (int64_t b = 0; b < B; b += 2)
    for (int64_t j = 2 * T / 3; j < T; ++j) m[static_cast<size_t>(b * T + j)] = 0;
  const Tensor mask = Tensor::from_ints(m, {B, T});
  Tensor y = Tensor::empty({B * H, T, T}, DType::bf16);
  for (auto _ : state) {
    masked_softmax(x, mask, 0.125f, y);
    benchmark::ClobberMemory();
  }
  report(state, B * H * T * T * 6);
}

void BM_LayerNormForward(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::f32, 1), w = Tensor::randn({C}, DType::f32, 2),
               b = Tensor::randn({C}, DType::f32, 3);
  Tensor y = Tensor::empty({kRows, C}, DType::f32), mean = Tensor::empty({kRows}, DType::f32),
         rstd = Tensor::empty({kRows}, DType::f32);
  for (auto _ : state) {
    layer_norm(x, w, b, 1e-5f, y, &mean, &rstd);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 8);
}

void BM_LayerNormBackward(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::f32, 1), w = Tensor::randn({C}, DType::f32, 2),
               b = Tensor::randn({C}, DType::f32, 3), g = Tensor::randn({kRows, C}, DType::f32, 4);
  Tensor y = Tensor::empty({kRows, C}, DType::f32), mean = Tensor::empty({kRows}, DType::f32),
         rstd = Tensor::empty({kRows}, DType::f32);
  layer_norm(x, w, b, 1e-5f, y, &mean, &rstd);
  Tensor dx = Tensor::empty({kRows, C}, DType::f32), dw = Tensor::zeros({C}, DType::f32),
         db = Tensor::zeros({C}, DType::f32);
  for (auto _ : state) {
    layer_norm_backward(x, w, mean, rstd, g, dx, dw, db);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 12);
}

void BM_ResidualAdd(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Form form(state.range(1));
  const Tensor x = Tensor::randn({kRows, C}, DType::f32, 1), h = Tensor::randn({kRows, C}, DType::bf16, 2);
  Tensor y = Tensor::empty({kRows, C}, DType::f32);
  for (auto _ : state) {
    add(x, h, y);
    benchmark::ClobberMemory();
  }
  report(state, kRows * C * 10);
}

void forms(benchmark::internal::Benchmark* b, int64_t C) {
  for (int64_t portable : {0, 1}) b->Args({C, portable});
}

BENCHMARK(BM_Bf16Copy)->Args({1536, 0})->Args({384, 0})->UseRealTime();
BENCHMARK(BM_GeluForward)->Apply([](auto* b) { forms(b, 1536); }) -> UseRealTime();
BENCHMARK(BM_GeluBackward)->Apply([](auto* b) { forms(b, 1536); }) -> UseRealTime();
BENCHMARK(BM_GeluErfForward)->Apply([](auto* b) { forms(b, 1536); }) -> UseRealTime();
BENCHMARK(BM_GeluErfBackward)->Apply([](auto* b) { forms(b, 1536); }) -> UseRealTime();
BENCHMARK(BM_MaskedSoftmax)->Apply([](auto* b) { forms(b, 128); }) -> UseRealTime();
BENCHMARK(BM_LayerNormForward)->Apply([](auto* b) { forms(b, 384); }) -> UseRealTime();
BENCHMARK(BM_LayerNormBackward)->Apply([](auto* b) { forms(b, 384); }) -> UseRealTime();
BENCHMARK(BM_ResidualAdd)->Apply([](auto* b) { forms(b, 384); }) -> UseRealTime();

}  // namespace
}  // namespace mixtrain

BENCHMARK_MAIN();
