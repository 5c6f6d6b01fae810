// What the CPU GEMM runs on this machine: oneDNN's implementation name per input dtype (for
// `mixtrain info`), whether fp16 inputs are converted to fp32 first, and the counters of the
// oneDNN primitive cache (tests check that a steady state creates no primitives).
#pragma once
#include <cstdint>
#include <string>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain {

// oneDNN's implementation name (primitive_desc::impl_info_str(), e.g. "brg:avx512_core_bf16") for
// inputs of in_dtype and an f32 output at a typical shape (M = N = K = 256), plus a note where
// the inputs are converted, e.g. "brg:avx512_core (fp16 converted to fp32: no fp16 arithmetic on
// this CPU)". "reference (MIXTRAIN_FORCE_REFERENCE)" while force_reference() is on.
std::string gemm_impl_name(DType in_dtype);

// The same for one problem: op(a) (M, K) @ op(b) (K, N) -> (M, N), contiguous, in -> out dtypes.
std::string gemm_impl_for(DType in_dtype, DType out_dtype, int64_t m, int64_t n, int64_t k);

// True when fp16 inputs are converted to fp32 before an fp32 matmul (no avx512_fp16 on this CPU,
// or oneDNN has no fp16 matmul for it).
bool gemm_fp16_converts_to_f32();

// The temporary memory gemm() takes on this machine for one problem: op(a) (batch|1, M, K) @
// op(b) (batch|1, K, N) -> (batch, M, N), each operand's rows dense (a transposed operand stored
// the other way round), its matrices a batch stride apart (dense when 0: slices of a longer
// sequence are not), plus beta and whether a bias row is added. Each kind lives in a per-thread
// buffer (MemCategory::workspace) that grows to the largest need and is kept between calls
// (freed after a call only when over 64 MiB). For the memory predictor (models/gpt_memory.h).
struct GemmQuery {
  DType in = DType::f32, out = DType::f32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool a_batched = false, b_batched = false;  // false: one matrix shared by the batch
  int64_t a_batch_stride = 0, b_batch_stride = 0, c_batch_stride = 0;  // elements; 0: r * c
  bool trans_a = false, trans_b = false;
  float beta = 0.f;
  bool bias = false;
};
struct GemmScratchBytes {
  int64_t scratchpad = 0;  // oneDNN's own scratchpad for the primitive
  int64_t src_f32 = 0;     // fp32 copy of op(a), when the inputs are converted (fp16 without fp16 arithmetic)
  int64_t wei_f32 = 0;     // fp32 copy of op(b), likewise
  int64_t dst_f32 = 0;     // fp32 output, when oneDNN cannot write the output dtype directly
};
GemmScratchBytes gemm_scratch_for(const GemmQuery& q);
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

}  // namespace mixtrain
