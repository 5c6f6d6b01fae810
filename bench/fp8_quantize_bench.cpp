// Throughput of fp8_quantize (kernels/fp8.h), the fp8 recipes' only extra work over bf16-mixed, at
// gpt-mini's operand shapes (M = 16 x 256 rows of 384 and 1536 columns, bf16, as fp8-mixed hands
// them over), each recipe's operand layouts: blocks along the columns (the forward GEMM's x and w,
// the input-gradient GEMM's dy) and along the rows (the weight-gradient GEMM's dy and x). Beside it
// a bf16 copy of the same rows (read once, written once: what the cast must at least move).
// bytes_per_second counts the bf16 bytes read and written (4 per element), so a row's ratio to the
// copy's is how far the cast is from the bandwidth it needs. portable:1 runs the portable loops
// instead of the AVX-512 intrinsics (kernels/cpu/simd_forms.h), as a CPU without AVX-512 would.
//   build/bench/fp8_quantize_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <string>

#include "kernels/cpu/simd_forms.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {
namespace {

constexpr int64_t kRows = 16 * 256;

// threads 0: all OpenMP threads; else that many.
struct Threads {
  int saved;
  explicit Threads(int n) : saved(num_threads()) {
    if (n > 0) set_num_threads(n);
  }
  ~Threads() { set_num_threads(saved); }
};

void report(benchmark::State& state, int64_t elements) {
  state.SetBytesProcessed(int64_t(state.iterations()) * elements * 4);
  state.SetItemsProcessed(int64_t(state.iterations()) * elements);
}

// args: columns, recipe, reduce_along_cols (1) or rows (0), weight (1: the block recipe's 128 x 128
// tiles), threads (0: all), portable (1: the portable loops).
void BM_Fp8Quantize(benchmark::State& state) {
  const int64_t C = state.range(0);
  const auto recipe = static_cast<Fp8Recipe>(state.range(1));
  const bool along_cols = state.range(2) != 0, weight = state.range(3) != 0;
  const Threads th(int(state.range(4)));
  cpu::set_portable_forms_only(state.range(5) != 0);
  const int64_t R = weight ? C : kRows;  // a weight: square enough for its tiles
  const Fp8Quant how = fp8_operand_quant(recipe, DType::f8_e4m3, weight, along_cols);
  const Tensor x = Tensor::randn({R, C}, DType::bf16, 1);
  const Shape grid = fp8_blocks(how, R, C).grid();
  Tensor q = Tensor::empty({R, C}, DType::bf16), si = Tensor::empty(grid, DType::f32),
         am = Tensor::empty(grid, DType::f32);
  for (auto _ : state) {
    fp8_quantize(x, how, nullptr, q, si, am);
    benchmark::ClobberMemory();
  }
  cpu::set_portable_forms_only(false);
  report(state, R * C);
  state.SetLabel(std::string(fp8_recipe_name(recipe)) + (weight ? " weight" : "") +
                 (along_cols ? " along cols" : " along rows") + (state.range(5) ? " portable" : ""));
}

// The ceiling: the same rows copied (read and written once, bf16).
void BM_Bf16Copy(benchmark::State& state) {
  const int64_t C = state.range(0);
  const Threads th(int(state.range(1)));
  const Tensor x = Tensor::randn({kRows, C}, DType::bf16, 1);
  Tensor q = Tensor::empty({kRows, C}, DType::bf16);
  const int nt = num_threads();
  const size_t bytes = size_t(kRows * C) * 2;
  for (auto _ : state) {
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      const size_t lo = bytes * size_t(t) / size_t(n) / 64 * 64,
                   hi = bytes * size_t(t + 1) / size_t(n) / 64 * 64;
      std::memcpy(static_cast<char*>(q.raw_data()) + lo, static_cast<const char*>(x.raw_data()) + lo,
                  (t + 1 == n ? bytes : hi) - lo);
    }
    benchmark::ClobberMemory();
  }
  report(state, kRows * C);
}

void recipes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"C", "recipe", "cols", "weight", "threads", "portable"});
  for (int portable : {0, 1})
    for (int threads : {1, 0})
      for (int64_t C : {384, 1536}) {
        for (Fp8Recipe r : {Fp8Recipe::current, Fp8Recipe::rowwise, Fp8Recipe::mxfp8, Fp8Recipe::block})
          for (int cols : {1, 0}) b->Args({C, int64_t(r), cols, 0, threads, portable});
        b->Args({C, int64_t(Fp8Recipe::block), 1, 1, threads, portable});
      }
}
BENCHMARK(BM_Fp8Quantize)->Apply(recipes)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Bf16Copy)
    ->ArgNames({"C", "threads"})
    ->ArgsProduct({{384, 1536}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mixtrain

BENCHMARK_MAIN();
