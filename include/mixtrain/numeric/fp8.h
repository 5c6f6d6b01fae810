// OCP 8-bit float storage types, E4M3 (no inf, one NaN per sign, max 448) and E5M2 (IEEE-like,
// max 57344), with scalar fp32 conversions. Semantics follow the OCP FP8 spec and, for the
// saturating mode, CUDA's __NV_SATFINITE (Transformer Engine's casts).
#pragma once
#include <bit>
#include <cstdint>

#include "mixtrain/numeric/rounding.h"

namespace mixtrain {

// An OCP E4M3 value: S EEEE MMM, bias 7. No implicit conversions.
struct fp8_e4m3 {
  uint8_t bits_;  // public only to keep the type standard-layout; use bits()

  fp8_e4m3() = default;
  static constexpr fp8_e4m3 from_bits(uint8_t b) {
    fp8_e4m3 r;
    r.bits_ = b;
    return r;
  }
  constexpr uint8_t bits() const { return bits_; }
  // Compares BITS, not values: +0 != -0 and a NaN equals itself.
  friend constexpr bool operator==(fp8_e4m3 a, fp8_e4m3 b) { return a.bits_ == b.bits_; }
};
static_assert(sizeof(fp8_e4m3) == 1);

// An OCP E5M2 value: S EEEEE MM, bias 15 (the top byte of an fp16). No implicit conversions.
struct fp8_e5m2 {
  uint8_t bits_;  // public only to keep the type standard-layout; use bits()

  fp8_e5m2() = default;
  static constexpr fp8_e5m2 from_bits(uint8_t b) {
    fp8_e5m2 r;
    r.bits_ = b;
    return r;
  }
  constexpr uint8_t bits() const { return bits_; }
  // Compares BITS, not values: +0 != -0 and a NaN equals itself.
  friend constexpr bool operator==(fp8_e5m2 a, fp8_e5m2 b) { return a.bits_ == b.bits_; }
};
static_assert(sizeof(fp8_e5m2) == 1);

// What a value past the largest finite does. nan: E4M3 -> NaN (it has no inf), E5M2 -> inf
// (IEEE). saturate: clamp to +-max finite (448 / 57344); inf inputs clamp too, as with CUDA's
// __NV_SATFINITE. NaN inputs stay NaN in both modes.
enum class Fp8Overflow { nan, saturate };

// fp32 -> E4M3, round to nearest even. |x| up to 464 rounds to 448 (464 is the tie between 448
// and the non-existent 480, and 448's mantissa is even); anything larger overflows.
constexpr fp8_e4m3 fp8_e4m3_from_f32(float f, Fp8Overflow overflow = Fp8Overflow::nan) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  //   f32:  S EEEEEEEE MMMMMMMMMMMMMMMMMMMMMMM
  //   e4m3: S EEEE MMM              (S.1111.111 is NaN; S.1111.110 = 448 is the max)
  const uint8_t sign = uint8_t((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return fp8_e4m3::from_bits(uint8_t(sign | 0x7fu));  // the only NaN
  const uint32_t code = detail::f32_magnitude_to_narrow_rne<3, 7>(a);      // inf lands past 0x7e too
  if (code > 0x7eu) {
    return fp8_e4m3::from_bits(uint8_t(sign | (overflow == Fp8Overflow::saturate ? 0x7eu : 0x7fu)));
  }
  return fp8_e4m3::from_bits(uint8_t(sign | code));
}

// E4M3 -> fp32, exact; the NaN pattern decodes to a quiet NaN with the same sign.
constexpr float f32_from_fp8_e4m3(fp8_e4m3 v) {
  const uint32_t b = v.bits();
  const uint32_t sign = (b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0x0fu;
  const uint32_t m = b & 0x07u;
  if (e == 0x0f && m == 0x07) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    // Subnormal m * 2^-9 with leading one at index p: f32 exponent field p - 9 + 127.
    //   e4m3: S 0000 0xx  ->  f32: S (p+118) (m without leading one) << (23-p)
    const uint32_t p = uint32_t(std::bit_width(m)) - 1;
    return std::bit_cast<float>(sign | ((p + 118) << 23) | ((m << (23 - p)) & 0x007fffffu));
  }
  //   e4m3: S EEEE MMM  ->  f32: S (E+120) MMM00000000000000000000
  return std::bit_cast<float>(sign | ((e + 120) << 23) | (m << 20));
}

// fp32 -> E5M2, round to nearest even. |x| >= 61440 (the tie between 57344 and 65536, which goes
// to the even 65536) overflows. NaN keeps its sign and top payload bit and is made quiet.
constexpr fp8_e5m2 fp8_e5m2_from_f32(float f, Fp8Overflow overflow = Fp8Overflow::nan) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  //   f32:  S EEEEEEEE MMMMMMMMMMMMMMMMMMMMMMM
  //   e5m2: S EEEEE MM
  const uint8_t sign = uint8_t((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) {
    //   f32:  S 11111111 QPxxxxxxxxxxxxxxxxxxxxx  ->  e5m2: S 11111 1P
    return fp8_e5m2::from_bits(uint8_t(sign | 0x7eu | ((a >> 21) & 0x01u)));
  }
  const uint32_t code = detail::f32_magnitude_to_narrow_rne<2, 15>(a);
  if (code >= 0x7cu) {  // past 57344 (0x7b), including inf itself
    return fp8_e5m2::from_bits(uint8_t(sign | (overflow == Fp8Overflow::saturate ? 0x7bu : 0x7cu)));
  }
  return fp8_e5m2::from_bits(uint8_t(sign | code));
}

// E5M2 -> fp32, exact; NaNs keep sign and payload and become quiet (the same rule as fp16,
// whose top byte E5M2 is).
constexpr float f32_from_fp8_e5m2(fp8_e5m2 v) {
  const uint32_t b = v.bits();
  const uint32_t sign = (b & 0x80u) << 24;
  const uint32_t e = (b >> 2) & 0x1fu;
  const uint32_t m = b & 0x03u;
  if (e == 0x1f) {
    const uint32_t nan_quiet = m != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | nan_quiet | (m << 21));
  }
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    // Subnormal m * 2^-16, leading one at index p: f32 exponent field p - 16 + 127.
    const uint32_t p = uint32_t(std::bit_width(m)) - 1;
    return std::bit_cast<float>(sign | ((p + 111) << 23) | ((m << (23 - p)) & 0x007fffffu));
  }
  //   e5m2: S EEEEE MM  ->  f32: S (E+112) MM000000000000000000000
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 21));
}

}  // namespace mixtrain
