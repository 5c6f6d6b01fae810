// Bulk conversion benchmark (see include/mixtrain/bench/convert_bench.h). Each case runs a few
// times and the best time is kept: on a shared machine the best run is the one least disturbed by
// neighbours, and all cases are measured the same way in one run, so their ratios are fair.
#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>

#include "convert_bench.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/tensor/tensor.h"
#include "parallel_memcpy.h"

namespace mixtrain {
namespace {

double best_seconds(const std::function<void()>& f, int reps) {
  f();  // warm-up: page-faults the destination, loads caches/TLBs
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return best;
}

}  // namespace

std::vector<ConvertBenchResult> run_convert_bench(int64_t n) {
  const auto un = static_cast<size_t>(n);
  Tensor src = Tensor::randn({n}, DType::f32, 7, 0.f, 1.f, MemCategory::workspace);
  Tensor dst32 = Tensor::empty({n}, DType::f32, MemCategory::workspace);
  Tensor b16 = Tensor::empty({n}, DType::bf16, MemCategory::workspace);
  Tensor h16 = Tensor::empty({n}, DType::f16, MemCategory::workspace);
  const float* s = src.data<float>();
  float* d = dst32.data<float>();
  bf16* b = b16.data<bf16>();
  fp16* h = h16.data<fp16>();
  const int reps = 7;
  const double b32 = 4.0 * static_cast<double>(n), b16n = 2.0 * static_cast<double>(n);

  std::vector<ConvertBenchResult> r;
  auto add = [&](std::string name, std::string impl, double bytes, const std::function<void()>& f) {
    r.push_back({std::move(name), std::move(impl), bytes / best_seconds(f, reps) / 1e9, 0});
  };
  // The ceiling: memcpy of the fp32 buffer split over the same threads as the conversions.
  add("memcpy f32", "memcpy x" + std::to_string(num_threads()), 2 * b32,
      [&] { bench::parallel_memcpy(d, s, un * 4, num_threads()); });
  add("f32->bf16", f32_to_bf16_impl_name(), b32 + b16n, [&] { convert_f32_to_bf16(s, b, un); });
  add("f32->bf16", "scalar", b32 + b16n, [&] { convert_f32_to_bf16_scalar(s, b, un); });
  add("bf16->f32", "dispatched", b16n + b32, [&] { convert_bf16_to_f32(b, d, un); });
  add("f32->f16", f32_to_fp16_impl_name(), b32 + b16n, [&] { convert_f32_to_fp16(s, h, un); });
  add("f32->f16", "scalar", b32 + b16n, [&] { convert_f32_to_fp16_scalar(s, h, un); });
  add("f16->f32", "dispatched", b16n + b32, [&] { convert_fp16_to_f32(h, d, un); });
  fp8_e4m3* e = reinterpret_cast<fp8_e4m3*>(h);  // the fp16 buffer holds n one-byte codes too
  add("f32->e4m3", f32_to_fp8_e4m3_impl_name(), b32 + b16n / 2, [&] { convert_f32_to_fp8_e4m3(s, e, un); });
  add("f32->e4m3", "scalar", b32 + b16n / 2, [&] { convert_f32_to_fp8_e4m3_scalar(s, e, un); });
  for (auto& x : r) x.fraction_of_memcpy = x.gbytes_per_s / r[0].gbytes_per_s;
  return r;
}

nlohmann::json convert_bench_to_json(const std::vector<ConvertBenchResult>& r) {
  nlohmann::json j;
  j["threads"] = num_threads();
  j["results"] = nlohmann::json::array();
  for (const auto& x : r)
    j["results"].push_back({{"name", x.name},
                            {"impl", x.impl},
                            {"gbytes_per_s", x.gbytes_per_s},
                            {"fraction_of_memcpy", x.fraction_of_memcpy}});
  return j;
}

std::string convert_bench_table(const std::vector<ConvertBenchResult>& r) {
  std::ostringstream o;
  char line[160];
  std::snprintf(line, sizeof line, "%-12s %-12s %10s %12s\n", "conversion", "impl", "GB/s", "vs memcpy");
  o << line;
  for (const auto& x : r) {
    std::snprintf(line, sizeof line, "%-12s %-12s %10.2f %11.2fx\n", x.name.c_str(), x.impl.c_str(),
                  x.gbytes_per_s, x.fraction_of_memcpy);
    o << line;
  }
  o << "(GB/s counts bytes read + bytes written; best of 7 runs, threads=" << num_threads() << ")\n";
  return o.str();
}

}  // namespace mixtrain
