// The row primitives fp8_cpu.cpp's quantization passes are made of, in two forms: loops the
// compiler vectorises (fp8_cpu.cpp, any x86-64 CPU) and AVX-512 intrinsics (fp8_avx512.cpp), for
// what GCC does not find itself: the horizontal maximum of each short block (MXFP8's 32, the block
// recipe's 128), which its vectoriser turned into a spill and a shuffle chain per block, and the
// fp8 rounding as exponent, roundscale and scalef (four instructions) instead of integer bit work.
// Both forms compute kernels/fp8.h's definitions bit for bit (tests/kernels/ops/fp8_test.cpp).
#pragma once
#include <cstdint>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain::cpu {

struct Fp8RowKernels {
  // g[j] = max(g[j], max |x| over the j-th run of bc of the row's C elements); bc == 1: per
  // element. A NaN or inf counts as +inf. x f32 or bf16 (xt).
  void (*block_maxes)(const void* x, DType xt, int64_t C, int64_t bc, float* g);
  // The row's C elements cast: o[c] = fp8(x[c] * s[c / bc]) (* sinv[c / bc] when dequantize),
  // rounded to nearest even, saturating, into o (f32 or bf16, ot); bc == 1: a scale per element.
  // A block whose scale is NaN (not finite) comes out as the quiet NaN. format: f8_e4m3 or f8_e5m2.
  // pow2_scales: every scale that is not NaN is a power of two and its sinv is 1 / s (the e8m0
  // and pow2 rules), which the AVX-512 form's bf16 path relies on.
  void (*cast_blocks)(const void* x, DType xt, const float* s, const float* sinv, int64_t bc, bool dequantize,
                      bool pow2_scales, void* o, DType ot, DType format, int64_t C);
  // Whether cast_blocks is fastest given a scale per block (the AVX-512 form broadcasts it; the
  // portable loops spread it over the columns first, which a caller with rows sharing their blocks'
  // scales does once for them all instead).
  bool block_scales_preferred;
};

// The vectorised loops (every CPU), and the AVX-512 form (null where the CPU lacks AVX-512 F, BW
// and VL).
const Fp8RowKernels& fp8_rows_portable();
const Fp8RowKernels* fp8_rows_avx512();
// The form cpu::fp8_quantize uses: AVX-512 where there is one, unless the tests asked for the
// portable loops (simd_forms.h: set_portable_forms_only).
const Fp8RowKernels& fp8_rows();

}  // namespace mixtrain::cpu
