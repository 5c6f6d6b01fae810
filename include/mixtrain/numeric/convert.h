// Bulk conversions between fp32 and the storage formats (bf16, fp16, fp8). The plain names
// dispatch at run time to the fastest variant this CPU supports (chosen once; the scalar one
// whenever force_reference() is on) and use OpenMP for large n. Every variant produces exactly
// the bits of the scalar functions in bf16.h / fp16.h / fp8.h, checked over all 2^32 inputs.
#pragma once
#include <cstddef>

#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"
#include "mixtrain/numeric/fp8.h"

namespace mixtrain {

// ---- dispatched (any length, any alignment of the element type; src and dst must not overlap)
void convert_f32_to_bf16(const float* src, bf16* dst, size_t n);
void convert_bf16_to_f32(const bf16* src, float* dst, size_t n);
void convert_f32_to_fp16(const float* src, fp16* dst, size_t n);
void convert_fp16_to_f32(const fp16* src, float* dst, size_t n);
void convert_f32_to_fp8_e4m3(const float* src, fp8_e4m3* dst, size_t n,
                             Fp8Overflow overflow = Fp8Overflow::nan);
void convert_fp8_e4m3_to_f32(const fp8_e4m3* src, float* dst, size_t n);
void convert_f32_to_fp8_e5m2(const float* src, fp8_e5m2* dst, size_t n,
                             Fp8Overflow overflow = Fp8Overflow::nan);
void convert_fp8_e5m2_to_f32(const fp8_e5m2* src, float* dst, size_t n);

// Which variant the dispatched call would use right now: "avx512bf16", "avx512", "f16c" or
// "scalar" (for `mixtrain info`). fp8 decoding is a table; fp32 -> E4M3 has an avx512 variant,
// fp32 -> E5M2 is the scalar loop.
const char* f32_to_bf16_impl_name();
const char* bf16_to_f32_impl_name();
const char* f32_to_fp16_impl_name();
const char* fp16_to_f32_impl_name();
const char* f32_to_fp8_e4m3_impl_name();  // "avx512" or "scalar" (both overflow modes alike)

// ---- the variants, single-threaded. Calling a SIMD variant on a CPU without its feature
// (see cpu_features()) is undefined (SIGILL); they exist for tests and benchmarks.
// _scalar: a loop over the scalar function, the oracle.
void convert_f32_to_bf16_scalar(const float* src, bf16* dst, size_t n);
void convert_bf16_to_f32_scalar(const bf16* src, float* dst, size_t n);
void convert_f32_to_fp16_scalar(const float* src, fp16* dst, size_t n);
void convert_fp16_to_f32_scalar(const fp16* src, float* dst, size_t n);
// needs avx512f+avx512bw+avx512vl+avx512_bf16: VCVTNEPS2BF16, with fp32 subnormal inputs (which
// the instruction treats as zero) fixed up to the scalar result.
void convert_f32_to_bf16_avx512bf16(const float* src, bf16* dst, size_t n);
// needs avx512f: integer round-to-nearest-even, 16 lanes.
void convert_f32_to_bf16_avx512(const float* src, bf16* dst, size_t n);
// needs avx512f+avx512bw+avx512vl: convert_f32_to_bf16_stochastic's
// element i, counter_rng_keyed(key, base + i) (numeric/stochastic.h), on 16 lanes.
void convert_f32_to_bf16_stochastic_avx512(const float* src, bf16* dst, size_t n, uint64_t key,
                                           uint64_t base);
// needs avx512f: widen and shift.
void convert_bf16_to_f32_avx512(const bf16* src, float* dst, size_t n);
// needs f16c+avx2+fma: VCVTPS2PH (ties-to-even immediate, MXCSR not consulted) / VCVTPH2PS.
void convert_f32_to_fp16_f16c(const float* src, fp16* dst, size_t n);
void convert_fp16_to_f32_f16c(const fp16* src, float* dst, size_t n);
// needs avx512f: the same instructions on 16 lanes.
void convert_f32_to_fp16_avx512(const float* src, fp16* dst, size_t n);
void convert_fp16_to_f32_avx512(const fp16* src, float* dst, size_t n);
// fp32 -> E4M3 (overflow to NaN, and _saturate: to +-448): the scalar loop, and needs avx512f:
// the same integer rounding on 16 lanes, branch-free.
void convert_f32_to_fp8_e4m3_scalar(const float* src, fp8_e4m3* dst, size_t n);
void convert_f32_to_fp8_e4m3_saturate_scalar(const float* src, fp8_e4m3* dst, size_t n);
void convert_f32_to_fp8_e4m3_avx512(const float* src, fp8_e4m3* dst, size_t n);
void convert_f32_to_fp8_e4m3_saturate_avx512(const float* src, fp8_e4m3* dst, size_t n);

}  // namespace mixtrain
