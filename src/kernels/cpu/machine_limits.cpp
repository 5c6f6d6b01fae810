// The machine's limits for the roofline (kernels/machine_limits.h): the triad, the ISA peak.
#include "mixtrain/kernels/machine_limits.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {
namespace {

// a = b + s * c, split over the threads in static blocks (each thread touches its own pages, as
// STREAM's OpenMP version does).
void triad(float* a, const float* b, const float* c, float s, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// "cpu family" and "cpu MHz" of the first processor in /proc/cpuinfo.
void read_cpuinfo(int& family, double& mhz) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  family = 0;
  mhz = 0;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (mhz > 0) break;  // the end of the first processor's block
      continue;
    }
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = line.substr(colon + 1);
    try {
      if (key == "cpu family") family = std::stoi(value);
      if (key == "cpu MHz") mhz = std::stod(value);
    } catch (const std::exception&) {
      // a malformed line: left at 0 (the peak then says the clock is unknown)
    }
  }
}

}  // namespace

double measure_triad_bytes_per_s(double seconds, int64_t bytes_per_array) {
  const int64_t n = std::max<int64_t>(1, bytes_per_array / 4);
  Tensor a = Tensor::zeros({n}, DType::f32, MemCategory::workspace);  // zeros: every page touched once
  const Tensor b = Tensor::full({n}, DType::f32, 1.0, MemCategory::workspace);
  const Tensor c = Tensor::full({n}, DType::f32, 2.0, MemCategory::workspace);
  float* pa = static_cast<float*>(a.raw_data());
  const float* pb = static_cast<const float*>(b.raw_data());
  const float* pc = static_cast<const float*>(c.raw_data());
  using Clock = std::chrono::steady_clock;
  double best = 1e30;
  const auto t0 = Clock::now();
  int passes = 0;
  do {
    const auto t = Clock::now();
    triad(pa, pb, pc, 3.f, n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
    ++passes;
  } while (passes < 3 || std::chrono::duration<double>(Clock::now() - t0).count() < seconds);
  return 3.0 * 4.0 * static_cast<double>(n) / best;
}

IsaPeak isa_peak(DType dtype) {
  const CpuFeatures& f = cpu_features();
  int family = 0;
  double mhz = 0;
  read_cpuinfo(family, mhz);
  IsaPeak p;
  p.ghz = mhz / 1000.0;
  // fp32 FMA: two FMA pipes everywhere here; AMD's Zen 4 runs AVX-512 on 256-bit pipes (Zen 5,
  // family 26, on 512-bit ones). Xeons with one 512-bit FMA unit exist (some Silver/Bronze): this
  // table assumes two.
  const bool amd = !f.intel;
  const bool wide512 = f.avx512f && !(amd && family < 26);
  double fp32 = 0;
  std::string fp32_basis;
  if (wide512) {
    fp32 = 64;
    fp32_basis = "AVX-512 FMA, 2 x 512-bit: 64 fp32 flops/cycle";
  } else if (f.avx512f || (f.avx2 && f.fma)) {
    fp32 = 32;
    fp32_basis = std::string(f.avx512f ? "AVX-512 on 256-bit pipes" : "AVX2 FMA") +
                 ", 2 x 256-bit: 32 fp32 flops/cycle";
  } else {
    fp32 = 8;
    fp32_basis = "SSE, 2 x 128-bit mul + add: 8 fp32 flops/cycle";
  }
  p.flops_per_cycle = fp32;
  p.basis = fp32_basis;
  const bool converted = dtype != DType::f32 && gemm_converts_to_f32(dtype);
  if (dtype == DType::bf16 && !converted) {
    if (f.amx_bf16) {
      p.flops_per_cycle = 1024;
      p.basis = "AMX-BF16 tiles: 1024 bf16 flops/cycle";
    } else if (f.avx512_bf16) {
      p.flops_per_cycle = 2 * fp32;  // VDPBF16PS: two products per fp32 lane
      p.basis =
          "AVX512-BF16 dot products: " + std::to_string(static_cast<int>(2 * fp32)) + " bf16 flops/cycle";
    }
  } else if (dtype == DType::f16 && !converted && gemm_splits_f16_into_bf16()) {
    p.flops_per_cycle = 1024 / 4;  // four bf16 products per fp16 product
    p.basis = "AMX-BF16 tiles, fp16 as bf16 hi + lo: 1024 / 4 = 256 fp16 flops/cycle";
  } else if (dtype == DType::f16 && !converted && f.avx512_fp16) {
    p.flops_per_cycle = 2 * fp32;  // 32 fp16 lanes per 512-bit FMA
    p.basis = "AVX512-FP16 FMA: " + std::to_string(static_cast<int>(2 * fp32)) + " fp16 flops/cycle";
  } else if (converted) {
    p.basis += " (" + std::string(dtype_name(dtype)) + " inputs converted to fp32)";
  }
  if (p.ghz <= 0) p.basis += "; clock unknown (no cpu MHz in /proc/cpuinfo)";
  return p;
}

}  // namespace mixtrain
