// The benchmark's yardstick: a oneDNN matmul created directly (plain row-major descriptors, the
// library's default scratchpad, no mixtrain code between the timer and oneDNN), on buffers the
// caller owns. Shared by `mixtrain bench gemm` (apps/mixtrain/gemm_bench_run.cpp) and the Google
// Benchmark micro-benchmarks (bench/gemm_bench.cpp): a small library of its own
// (mixtrain_bench_yardstick), outside the engine.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain::bench {

// c (M, N) f32 = a (M, K) @ b (K, N), a and b row-major in dtype `in`. For f16 where oneDNN has no
// f16 matmul (no fp16 arithmetic), the direct equivalent of mixtrain's path: oneDNN reorders a and
// b to f32 (into buffers this object owns), then runs the f32 matmul.
class DirectOnednnMatmul {
 public:
  DirectOnednnMatmul(DType in, int64_t m, int64_t n, int64_t k, void* a, void* b, float* c);
  ~DirectOnednnMatmul();
  DirectOnednnMatmul(const DirectOnednnMatmul&) = delete;
  DirectOnednnMatmul& operator=(const DirectOnednnMatmul&) = delete;
  void run();
  std::string impl() const;  // e.g. "brg:avx512_core" or "reorder f16->f32 + brg:avx512_core"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixtrain::bench
