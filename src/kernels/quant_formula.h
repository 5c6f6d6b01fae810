// The per-row quantization formula of kernels/quantize.h, shared by the scalar reference and the
// fast kernels so that both compute one definition (the fast kernels vectorise these lines; the
// harness holds them to the reference bit for bit).
#pragma once
#include <cmath>
#include <cstdint>

#include "mixtrain/numeric/fp8.h"
#include "mixtrain/tensor/dtype.h"

namespace mixtrain::quant {

// The largest code: 127 for int8, 448 for E4M3.
inline float code_max(DType codes) { return codes == DType::i8 ? 127.f : 448.f; }

// A row's multiplier (x * mul is the code before rounding) and its stored dequantization scale.
// amax below 2^-120 counts as zero: qmax / amax would overflow fp32 there (such a row is at most
// 2^-120 in magnitude, and dequantizes to 0).
struct RowScale {
  float mul;
  float scale;
};
inline RowScale row_scale(float amax, float qmax) {
  if (!std::isfinite(amax)) return {0.f, NAN};
  if (amax < 0x1p-120f) return {0.f, 1.f};
  return {qmax / amax, amax / qmax};
}

// v = x * mul, |v| <= 127 (1 + 2^-23): round to nearest even, saturate to [-128, 127].
inline int8_t int8_code(float v) {
  const float r = std::nearbyint(v);  // the default rounding mode: to nearest, ties to even
  return static_cast<int8_t>(std::fmin(127.f, std::fmax(-128.f, r)));
}

inline fp8_e4m3 e4m3_code(float v) { return fp8_e4m3_from_f32(v, Fp8Overflow::saturate); }

}  // namespace mixtrain::quant
