// Bulk conversion benchmark: GB/s (bytes read + bytes written) of each conversion, measured beside
// memcpy and a plain fp32 stream (read + write) on the same buffers in the same run — the
// memory-bandwidth ceiling the conversions aim at.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mixtrain {

struct ConvertBenchResult {
  std::string name;  // e.g. "f32->bf16"
  std::string impl;  // "avx512bf16", "scalar", "memcpy", ...
  double gbytes_per_s = 0;
  double fraction_of_memcpy = 0;
};

// n: number of fp32 elements of the source buffer.
std::vector<ConvertBenchResult> run_convert_bench(int64_t n);
nlohmann::json convert_bench_to_json(const std::vector<ConvertBenchResult>& r);
std::string convert_bench_table(const std::vector<ConvertBenchResult>& r);

}  // namespace mixtrain
