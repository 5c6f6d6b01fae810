// What the CPU GEMM runs on this machine: oneDNN's implementation name per input dtype (for
// `mixtrain info`), whether 16-bit inputs are converted to fp32 first, and the counters of the
// oneDNN primitive cache (tests check that a steady state creates no primitives).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/core/profiler.h"
#include "mixtrain/tensor/dtype.h"

namespace mixtrain {

// oneDNN's implementation name (primitive_desc::impl_info_str(), e.g. "brg:avx512_core_bf16") for
// inputs of in_dtype and an f32 output at a typical shape (M = N = K = 256), plus a note where
// the inputs are converted, e.g. "brg:avx512_core (fp16 converted to fp32: no fp16 arithmetic on
// this CPU)". "reference (MIXTRAIN_FORCE_REFERENCE)" while force_reference() is on.
std::string gemm_impl_name(DType in_dtype);

// The same for one problem: op(a) (M, K) @ op(b) (K, N) -> (M, N), contiguous, in -> out dtypes.
std::string gemm_impl_for(DType in_dtype, DType out_dtype, int64_t m, int64_t n, int64_t k);

// True when inputs of in_dtype (f16, bf16) are converted to fp32 (exactly) and run through the fp32
// matmul: f16 without avx512_fp16 on this CPU or an fp16 matmul in oneDNN; bf16 where oneDNN's
// bf16 kernel is the slower one (Intel with AVX512-BF16 and no AMX; MIXTRAIN_BF16_GEMM=native|fp32
// overrides).
bool gemm_converts_to_f32(DType in_dtype);

// True when fp16 GEMMs run as bf16 GEMMs over their inputs split into bf16 hi + lo parts (four
// exact products per fp16 product: MIXTRAIN_F16_GEMM=bf16x4; not the default, measured slower).
bool gemm_splits_f16_into_bf16();

// The oneDNN library loaded at run time, "major.minor.patch" (dnnl_version()).
std::string onednn_version();

// The CPU GEMM's temporaries live in per-thread buffers (MemCategory::workspace), one set per
// device, grown to the largest need and kept between calls (freed after a call only when over
// 64 MiB); the meta device's GEMM takes the same buffers (kernels/cpu/cpu_ops.h).
// Frees the calling thread's GEMM buffers (the next gemm() grows them again), so that a training
// run's memory peaks do not include a previous run's temporaries.
void gemm_scratch_release();

struct GemmCacheStats {
  int64_t hits = 0;      // lookups that found a primitive (or a remembered "unsupported")
  int64_t misses = 0;    // primitive descriptors created (successfully or not)
  int64_t size = 0;      // entries held now
  int64_t capacity = 0;  // least recently used entries are dropped beyond this
};
GemmCacheStats gemm_cache_stats();
void gemm_cache_clear();

// The GEMMs of a profiled stretch (while core/profiler.h is enabled), by problem: `bench train`
// times each problem again on its own, to set the step's GEMM time against the rate this machine
// gives at the step's own shapes and dtypes (train/bench_train.h: Roofline).
struct GemmProblem {
  int64_t batch = 1, m = 0, n = 0, k = 0;  // op(a) (batch, m, k) @ op(b) (k, n); b shared when
  bool batched_b = false;                  // not batched_b
  DType in = DType::f32, out = DType::f32;
  bool trans_a = false, trans_b = false, bias = false, accumulate = false;  // accumulate: beta != 0
  WorkKind kind = WorkKind::gemm;  // the op it ran in (the attention op's q k^T and p v: attention)
  double flops() const { return 2.0 * double(batch) * double(m) * double(n) * double(k); }
  auto operator<=>(const GemmProblem&) const = default;
};
struct GemmProblemCalls {
  GemmProblem problem;
  int64_t calls = 0;
};
std::vector<GemmProblemCalls> profiled_gemm_problems();  // since the last clear, in problem order
void clear_profiled_gemm_problems();
// Seconds one call of p takes here now: contiguous operands of its shapes and dtypes (random
// values), the median of the timed calls after one warm-up, as many as fit in about `budget`
// seconds (at least 3).
double time_gemm_problem(const GemmProblem& p, double budget_seconds);

}  // namespace mixtrain
