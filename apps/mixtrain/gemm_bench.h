// GEMM benchmark behind `mixtrain bench gemm`: GF/s of fp32, bf16 and fp16 GEMMs through
// mixtrain's gemm() and through a oneDNN matmul primitive created directly on the same shape and
// buffers, measured interleaved in one run, so the overhead of mixtrain's layer and the
// bf16/fp32 speed-up can be read off side by side.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mixtrain {

struct GemmBenchResult {
  std::string dtype;  // input dtype: "f32", "bf16", "f16" (output is always f32)
  int64_t m = 0, n = 0, k = 0;
  double gflops = 0;                // through mixtrain's gemm(): 2*M*N*K / best batch time per call
  double direct_onednn_gflops = 0;  // the same problem through a oneDNN primitive made directly
  std::string impl;                 // what gemm() ran (gemm_impl_for), e.g. "brg:avx512_core_bf16"
  std::string direct_impl;          // what the direct primitive ran (f16 here: a oneDNN reorder to f32 first)
};

// {M, N, K}: 1024^3, 2048^3, (2048, 768, 768), (2048, 3072, 768) (GPT-2-small-like projections).
std::vector<std::array<int64_t, 3>> default_gemm_bench_shapes();

// For every shape and dtype (f32, bf16, f16 inputs; f32 output): warm-up, then alternating timed
// batches of mixtrain and direct oneDNN calls until each has run min_seconds_per_case (at least 3
// batches each); the best batch of each is reported (see gemm_bench_run.cpp for why).
std::vector<GemmBenchResult> run_gemm_bench(const std::vector<std::array<int64_t, 3>>& shapes,
                                            double min_seconds_per_case);

// {"results": [{"dtype", "m", "n", "k", "gflops", "direct_onednn_gflops", "overhead_pct", "impl",
// "direct_impl"}...],
//  "bf16_over_fp32": mixtrain bf16 GF/s / fp32 GF/s at M=N=K=2048 (null if not measured),
//  "threads": num_threads()}. overhead_pct = (direct / mixtrain - 1) * 100 (> 0: mixtrain slower).
nlohmann::json gemm_bench_to_json(const std::vector<GemmBenchResult>& results);
// The same as a plain-text table, with the bf16/fp32 ratio line.
std::string gemm_bench_table(const std::vector<GemmBenchResult>& results);

}  // namespace mixtrain
