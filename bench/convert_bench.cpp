// Throughput of the bulk fp32 <-> bf16/fp16/fp8 conversions at 64 MiB of fp32 data: each SIMD
// variant single-threaded, and the dispatched call both single-threaded and with all OpenMP
// threads. bytes_per_second counts the fp32 side only (4 bytes per element, read or written),
// so the directions and formats are comparable.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {
namespace {

constexpr size_t kN = (size_t{64} << 20) / sizeof(float);  // 64 MiB of fp32

const std::vector<float>& f32_input() {
  static const std::vector<float> v = [] {
    std::vector<float> out(kN);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.f, 4.f);
    for (float& x : out) x = dist(rng);
    return out;
  }();
  return v;
}

template <class T>
std::vector<T> narrow_input() {
  std::vector<T> out(kN);
  const auto& f = f32_input();
  for (size_t i = 0; i < kN; ++i) {
    if constexpr (std::is_same_v<T, bf16>)
      out[i] = bf16_from_f32(f[i]);
    else
      out[i] = fp16_from_f32(f[i]);
  }
  return out;
}

// Runs `fn` with a fixed OpenMP thread count (0 = leave as is) and reports fp32-side bytes.
template <class Fn>
void run(benchmark::State& state, int threads, Fn fn) {
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  for (auto _ : state) {
    fn();
    benchmark::ClobberMemory();
  }
  omp_set_num_threads(saved);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kN * sizeof(float)));
}

template <class Dst>
void f32_to(benchmark::State& state, void (*fn)(const float*, Dst*, size_t), bool supported, int threads) {
  if (!supported) {
    state.SkipWithError("CPU lacks this variant");
    return;
  }
  std::vector<Dst> out(kN);
  const float* in = f32_input().data();
  run(state, threads, [&] { fn(in, out.data(), kN); });
}

template <class Src>
void to_f32(benchmark::State& state, void (*fn)(const Src*, float*, size_t), bool supported, int threads) {
  if (!supported) {
    state.SkipWithError("CPU lacks this variant");
    return;
  }
  const std::vector<Src> in = narrow_input<Src>();
  std::vector<float> out(kN);
  run(state, threads, [&] { fn(in.data(), out.data(), kN); });
}

const CpuFeatures& cpu() { return cpu_features(); }
bool has_bf16() { return cpu().avx512f && cpu().avx512bw && cpu().avx512vl && cpu().avx512_bf16; }
bool has_f16c() { return cpu().f16c && cpu().avx2 && cpu().fma; }

// Wall-clock time, since the multi-threaded runs spend most CPU time outside the main thread.
template <class... Args>
void reg(const std::string& name, Args&&... args) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

void register_all() {
  const int all = omp_get_max_threads();
  // fp32 -> bf16
  reg("f32_to_bf16/scalar", f32_to<bf16>, convert_f32_to_bf16_scalar, true, 1);
  reg("f32_to_bf16/avx512", f32_to<bf16>, convert_f32_to_bf16_avx512, cpu().avx512f, 1);
  reg("f32_to_bf16/avx512bf16", f32_to<bf16>, convert_f32_to_bf16_avx512bf16, has_bf16(), 1);
  reg("f32_to_bf16/dispatched/threads:1", f32_to<bf16>, convert_f32_to_bf16, true, 1);
  reg("f32_to_bf16/dispatched/threads:all", f32_to<bf16>, convert_f32_to_bf16, true, all);
  // bf16 -> fp32
  reg("bf16_to_f32/scalar", to_f32<bf16>, convert_bf16_to_f32_scalar, true, 1);
  reg("bf16_to_f32/avx512", to_f32<bf16>, convert_bf16_to_f32_avx512, cpu().avx512f, 1);
  reg("bf16_to_f32/dispatched/threads:1", to_f32<bf16>, convert_bf16_to_f32, true, 1);
  reg("bf16_to_f32/dispatched/threads:all", to_f32<bf16>, convert_bf16_to_f32, true, all);
  // fp32 -> fp16
  reg("f32_to_fp16/scalar", f32_to<fp16>, convert_f32_to_fp16_scalar, true, 1);
  reg("f32_to_fp16/f16c", f32_to<fp16>, convert_f32_to_fp16_f16c, has_f16c(), 1);
  reg("f32_to_fp16/avx512", f32_to<fp16>, convert_f32_to_fp16_avx512, cpu().avx512f, 1);
  reg("f32_to_fp16/dispatched/threads:1", f32_to<fp16>, convert_f32_to_fp16, true, 1);
  reg("f32_to_fp16/dispatched/threads:all", f32_to<fp16>, convert_f32_to_fp16, true, all);
  // fp16 -> fp32
  reg("fp16_to_f32/scalar", to_f32<fp16>, convert_fp16_to_f32_scalar, true, 1);
  reg("fp16_to_f32/f16c", to_f32<fp16>, convert_fp16_to_f32_f16c, has_f16c(), 1);
  reg("fp16_to_f32/avx512", to_f32<fp16>, convert_fp16_to_f32_avx512, cpu().avx512f, 1);
  reg("fp16_to_f32/dispatched/threads:1", to_f32<fp16>, convert_fp16_to_f32, true, 1);
  reg("fp16_to_f32/dispatched/threads:all", to_f32<fp16>, convert_fp16_to_f32, true, all);
  // fp8 (scalar only) and stochastic rounding, single-threaded and all threads.
  for (int t : {1, all}) {
    const char* suffix = t == 1 ? "threads:1" : "threads:all";
    reg(std::string("f32_to_fp8_e4m3/") + suffix, [t](benchmark::State& s) {
      f32_to<fp8_e4m3>(
          s,
          [](const float* in, fp8_e4m3* out, size_t n) {
            convert_f32_to_fp8_e4m3(in, out, n, Fp8Overflow::saturate);
          },
          true, t);
    });
    reg(std::string("f32_to_fp8_e5m2/") + suffix, [t](benchmark::State& s) {
      f32_to<fp8_e5m2>(
          s,
          [](const float* in, fp8_e5m2* out, size_t n) {
            convert_f32_to_fp8_e5m2(in, out, n, Fp8Overflow::nan);
          },
          true, t);
    });
    reg(std::string("f32_to_bf16_stochastic/") + suffix, [t](benchmark::State& s) {
      f32_to<bf16>(
          s, [](const float* in, bf16* out, size_t n) { convert_f32_to_bf16_stochastic(in, out, n, 42, 0); },
          true, t);
    });
    reg(std::string("f32_to_fp16_stochastic/") + suffix, [t](benchmark::State& s) {
      f32_to<fp16>(
          s, [](const float* in, fp16* out, size_t n) { convert_f32_to_fp16_stochastic(in, out, n, 42, 0); },
          true, t);
    });
  }
}

}  // namespace
}  // namespace mixtrain

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  mixtrain::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
