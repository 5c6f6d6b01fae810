// Google Benchmark micro-benchmarks of gemm(): mixtrain vs a oneDNN primitive made directly, for
// f32/bf16/f16 inputs (f32 output) at square sizes. Reports GFLOPS as a counter. The side-by-side
// table with the bf16/fp32 ratio is `mixtrain bench gemm`.
#include <benchmark/benchmark.h>

#include "direct_onednn_matmul.h"
#include "mixtrain/kernels/ops.h"

namespace {
using namespace mixtrain;

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * double(n) * double(n) * double(n) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_gemm_mixtrain(benchmark::State& state, DType t) {
  const int64_t n = state.range(0);
  Tensor a = Tensor::rand_uniform({n, n}, t, 1, -1.f, 1.f);
  Tensor b = Tensor::rand_uniform({n, n}, t, 2, -1.f, 1.f);
  Tensor c = Tensor::zeros({n, n}, DType::f32);
  gemm(a, b, c);  // warm-up: primitive creation
  for (auto _ : state) gemm(a, b, c);
  set_flops(state, n);
}

void BM_gemm_direct_onednn(benchmark::State& state, DType t) {
  const int64_t n = state.range(0);
  Tensor a = Tensor::rand_uniform({n, n}, t, 1, -1.f, 1.f);
  Tensor b = Tensor::rand_uniform({n, n}, t, 2, -1.f, 1.f);
  Tensor c = Tensor::zeros({n, n}, DType::f32);
  bench::DirectOnednnMatmul direct(t, n, n, n, a.raw_data(), b.raw_data(), c.data<float>());
  direct.run();
  for (auto _ : state) direct.run();
  set_flops(state, n);
  state.SetLabel(direct.impl());
}

BENCHMARK_CAPTURE(BM_gemm_mixtrain, f32, DType::f32)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gemm_direct_onednn, f32, DType::f32)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gemm_mixtrain, bf16, DType::bf16)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gemm_direct_onednn, bf16, DType::bf16)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gemm_mixtrain, f16, DType::f16)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_gemm_direct_onednn, f16, DType::f16)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
