// IEEE 754 binary16 storage type (1 sign, 5 exponent, 10 mantissa bits) and its scalar
// conversions to and from fp32: pure integer code, the oracle for the F16C/AVX-512 bulk paths.
// NaN handling is defined to be exactly what VCVTPS2PH/VCVTPH2PS do, so both paths agree.
#pragma once
#include <bit>
#include <cstdint>

#include "mixtrain/numeric/rounding.h"

namespace mixtrain {

// An fp16 value; no implicit conversions (see bf16 for the rationale).
struct fp16 {
  uint16_t bits_;  // public only to keep the type standard-layout; use bits()

  fp16() = default;  // user-declared, so fp16{0x3c00} does not compile
  static constexpr fp16 from_bits(uint16_t b) {
    fp16 r;
    r.bits_ = b;
    return r;
  }
  constexpr uint16_t bits() const { return bits_; }
  // Compares BITS, not values: +0 != -0 and a NaN equals itself.
  friend constexpr bool operator==(fp16 a, fp16 b) { return a.bits_ == b.bits_; }
};
static_assert(sizeof(fp16) == 2 && alignof(fp16) == 2);

// fp32 -> fp16, round to nearest even; |x| >= 65520 gives +-inf; results below 2^-14 are
// correctly rounded subnormals; NaN keeps its sign and top 10 payload bits and becomes quiet.
constexpr fp16 fp16_from_f32(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  //   f32:  S EEEEEEEE MMMMMMMMMMMMMMMMMMMMMMM
  //   fp16: S EEEEE MMMMMMMMMM
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) {
    // NaN: top 10 payload bits, quiet bit (mantissa bit 9) forced on -- as VCVTPS2PH does.
    //
    //   f32:  S 11111111 QPPPPPPPPPxxxxxxxxxxxxx
    //   fp16: S 11111 1PPPPPPPPP
    return fp16::from_bits(uint16_t(sign | 0x7e00u | ((a >> 13) & 0x03ffu)));
  }
  // Finite or inf: rebias 127 -> 15 and round 23 -> 10 mantissa bits (see rounding.h).
  const uint32_t code = detail::f32_magnitude_to_narrow_rne<10, 15>(a);
  // Codes from 0x7c00 up are past 65504 (including inf itself): overflow to inf.
  return fp16::from_bits(uint16_t(sign | (code >= 0x7c00u ? 0x7c00u : code)));
}

// fp16 -> fp32 is exact for numbers; a NaN keeps sign and payload and becomes quiet, as
// VCVTPH2PS does (IEEE: a conversion of a signaling NaN delivers a quiet one).
constexpr float f32_from_fp16(fp16 h) {
  const uint32_t b = h.bits();
  const uint32_t sign = (b & 0x8000u) << 16;
  const uint32_t e = (b >> 10) & 0x1fu;
  const uint32_t m = b & 0x03ffu;
  if (e == 0x1f) {
    //   fp16: S 11111 MMMMMMMMMM  ->  f32: S 11111111 MMMMMMMMMM0000000000000 (+ quiet bit)
    const uint32_t nan_quiet = m != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | nan_quiet | (m << 13));
  }
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);  // signed zero
    // Subnormal m * 2^-24: normalise. With p the index of m's leading one,
    //   value = 1.(m without its leading one) * 2^(p-24),   f32 exponent field = p - 24 + 127
    //   fp16: S 00000 000001xxxxx  ->  f32: S (p+103) xxxxx000...
    const uint32_t p = uint32_t(std::bit_width(m)) - 1;
    return std::bit_cast<float>(sign | ((p + 103) << 23) | ((m << (23 - p)) & 0x007fffffu));
  }
  // Normal: rebias 15 -> 127 and widen the mantissa.
  //   fp16: S EEEEE MMMMMMMMMM  ->  f32: S (E+112) MMMMMMMMMM0000000000000
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

}  // namespace mixtrain
