// The fp8 recipes' scale rules (kernels/fp8.h), shared by the scalar reference and the fast kernel
// so that both compute one definition, and the cast written twice: the reference's
// (numeric/fp8.h's conversions, one value at a time) and a branch-free form of the same rounding
// that vectorises (the fast kernel's; tests/kernels/ops/fp8_test.cpp holds it to the reference's
// on every bf16 input and on random fp32 bit patterns).
#pragma once
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "mixtrain/kernels/fp8.h"
#include "mixtrain/numeric/fp8.h"
#include "mixtrain/tensor/dtype.h"

namespace mixtrain::fp8q {

struct Scale {
  float scale;      // x * scale is cast
  float scale_inv;  // code * scale_inv is the dequantized value
};

// 2^k for k in [-127, 127], exactly (2^-127 is an fp32 subnormal), from the bits.
inline float pow2(int k) {
  return k >= -126 ? std::bit_cast<float>(uint32_t(k + 127) << 23) : std::bit_cast<float>(0x00400000u);
}

// A block's scale from its amax (amax = +inf for a block that is not finite).
inline Scale scale_from_amax(float amax, DType format, Fp8ScaleRule rule) {
  if (!std::isfinite(amax)) return {NAN, NAN};
  if (rule == Fp8ScaleRule::e8m0) {
    const int emax = format == DType::f8_e4m3 ? 8 : 15;
    int shared = -127;
    if (amax > 0.f) {
      // floor(log2(amax)), exactly, from the bits (amax may be an fp32 subnormal).
      const uint32_t b = std::bit_cast<uint32_t>(amax);
      const int e = int(b >> 23);
      const int floor_log2 = e != 0 ? e - 127 : int(std::bit_width(b & 0x7fffffu)) - 1 - 149;
      shared = floor_log2 - emax;
      shared = shared < -127 ? -127 : (shared > 127 ? 127 : shared);
    }
    return {pow2(-shared), pow2(shared)};
  }
  if (amax == 0.f) return {1.f, 1.f};
  float s = fp8_max(format) / amax;
  if (std::isinf(s)) s = FLT_MAX;
  if (rule == Fp8ScaleRule::pow2) s = std::bit_cast<float>(std::bit_cast<uint32_t>(s) & 0xff800000u);
  return {s, 1.f / s};
}

// A given scale (delayed scaling): its inverse.
inline Scale given_scale(float s) { return {s, 1.f / s}; }

// A block's scale as fp8_quantize takes it: the given one (delayed scaling; null: none) or the
// rule's from the amax; NaN for a block that is not finite, whichever.
inline Scale block_scale(float amax, const Fp8Quant& how, const float* given) {
  if (!std::isfinite(amax)) return {NAN, NAN};
  return given ? given_scale(*given) : scale_from_amax(amax, how.format, how.rule);
}

// The reference's cast: fp32 -> the format, round to nearest even, saturating.
inline float cast_value(float v, DType format) {
  if (format == DType::f8_e4m3) return f32_from_fp8_e4m3(fp8_e4m3_from_f32(v, Fp8Overflow::saturate));
  return f32_from_fp8_e5m2(fp8_e5m2_from_f32(v, Fp8Overflow::saturate));
}

// The same rounding without branches, on the value: M mantissa bits, normals down to 2^emin,
// subnormals in steps of 2^(emin - M), saturating at fmax. For a normal, adding half an ulp less
// one plus the ulp's parity bit to the fp32 bits and clearing the low bits rounds to nearest even
// (a carry into the exponent is the correct next binade); below 2^emin the value is rounded as an
// integer multiple of the subnormal step (adding and subtracting 1.5 * 2^23 times the step rounds
// to nearest even in the default mode). inf saturates; NaN becomes the quiet NaN.
template <int M, int Emin>
inline float round_fp8_fast(float v, float fmax) {
  constexpr uint32_t drop = 23 - M;
  constexpr uint32_t half = (1u << (drop - 1)) - 1u;
  const uint32_t b = std::bit_cast<uint32_t>(v);
  const uint32_t sign = b & 0x80000000u;
  const float a = std::fabs(v);
  const uint32_t ab = b & 0x7fffffffu;
  const uint32_t rn = (ab + half + ((ab >> drop) & 1u)) & ~((1u << drop) - 1u);
  float r = std::bit_cast<float>(rn);
  constexpr float step = 1.f / float(1u << (M - Emin));  // the subnormal step 2^(emin - M)
  constexpr float magic = 12582912.f * step;             // 1.5 * 2^23 * step
  constexpr float min_normal = 1.f / float(1u << -Emin);
  const float sub = (a + magic) - magic;
  r = a < min_normal ? sub : r;
  r = r > fmax ? fmax : r;
  r = a != a ? std::bit_cast<float>(0x7fc00000u) : r;  // NaN (the kernel never casts one: see fp8.h)
  return std::bit_cast<float>(std::bit_cast<uint32_t>(r) | sign);
}
inline float cast_value_fast(float v, DType format) {
  return format == DType::f8_e4m3 ? round_fp8_fast<3, -6>(v, 448.f) : round_fp8_fast<2, -14>(v, 57344.f);
}

// One element's part of Fp8ErrorStats (kernels/fp8.h), shared by the reference and the fast kernel.
// qv: q's value; si: the block's scale_inv; row: the row's running stats.
inline void error_element(float x, float qv, float si, const Fp8Quant& how, Fp8ErrorStats& row) {
  if (!std::isfinite(x) || !std::isfinite(si)) return;
  const double code = how.dequantize ? double(qv) / double(si) : double(qv);
  const double deq = how.dequantize ? double(qv) : double(qv) * double(si);
  const double fmax = fp8_max(how.format);
  const double min_normal = how.format == DType::f8_e4m3 ? 0x1p-6 : 0x1p-14;
  ++row.count;
  if (std::fabs(code) == fmax && std::fabs(double(x)) > fmax * double(si)) ++row.saturated;
  if (x != 0.f && std::fabs(code) < min_normal) ++row.underflow;
  const double e = deq - double(x);
  row.err2 += e * e;
  row.ref2 += double(x) * double(x);
}

}  // namespace mixtrain::fp8q
