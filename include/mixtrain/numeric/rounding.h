// Integer rounding helpers shared by the narrow float formats (fp16, fp8): round-to-nearest-even
// right shifts and the fp32 -> narrow magnitude encoder. Pure bit manipulation, constexpr, no
// dependence on the FPU rounding mode or MXCSR, so every format rounds the same way everywhere.
#pragma once
#include <cstdint>

namespace mixtrain::detail {

// v >> s, rounded to nearest with ties to even (s may exceed the width: the result is then 0,
// since v < 2^64 <= half of 2^s).
//
//   v:  [ kept bits ][ dropped bits (s) ]
//                     ^ half = 1 << (s-1)
//   dropped > half, or dropped == half and kept is odd  ->  kept + 1
constexpr uint64_t shift_right_rne(uint64_t v, unsigned s) {
  if (s == 0) return v;
  if (s > 64) return 0;
  if (s == 64) return v > (uint64_t{1} << 63) ? 1 : 0;  // exact half ties to even (0)
  const uint64_t kept = v >> s;
  const uint64_t dropped = v & ((uint64_t{1} << s) - 1);
  const uint64_t half = uint64_t{1} << (s - 1);
  return kept + ((dropped > half || (dropped == half && (kept & 1))) ? 1 : 0);
}

// Encodes the magnitude of a finite fp32 (abs_bits = bits & 0x7fffffff, not NaN; inf is allowed
// and simply lands past every max) into a narrow IEEE-like format with MantBits stored mantissa
// bits and exponent bias Bias, rounding to nearest even. The result is the narrow format's
// magnitude code (exponent << MantBits | mantissa) WITHOUT any clamping: the caller compares it
// with its own largest finite code and decides between inf, NaN and saturation. A carry out of
// the mantissa correctly bumps the exponent (1.11..1 rounds up to 10.0), and the largest
// subnormal correctly rounds up into the smallest normal code.
template <int MantBits, int Bias>
constexpr uint32_t f32_magnitude_to_narrow_rne(uint32_t abs_bits) {
  // Bias + MantBits <= 126 keeps half the smallest narrow subnormal at or above 2^-126 (see the
  // e == 0 case below); true for fp16 (25), E4M3 (10), E5M2 (17). bf16 needs no helper.
  static_assert(MantBits >= 1 && MantBits < 23 && Bias >= 1 && Bias + MantBits <= 126);
  const uint32_t e = abs_bits >> 23;  // biased fp32 exponent
  if (e >= uint32_t(128 - Bias)) {
    // Normal in the narrow format: rebias the exponent in place, then drop 23-MantBits bits.
    //
    //   f32:   0 EEEEEEEE MMMMMMMMMMMMMMMMMMMMMMM
    //        - 0 (127-Bias) 00000000000000000000000      (exponent now biased by Bias)
    //        = 0 000eeeee mmmmmmmmmm|ddddddddddddd      (fp16 shown: keep 10, drop 13)
    //   >> 13 with RNE -> 0 eeeee mmmmmmmmmm
    return uint32_t(shift_right_rne(abs_bits - (uint32_t(127 - Bias) << 23), 23 - MantBits));
  }
  // fp32 subnormals (e == 0) are below 2^-126 <= half the narrow format's smallest subnormal
  // (2^(-Bias-MantBits)), so they round to zero.
  if (e == 0) return 0;
  // Subnormal in the narrow format: make the implicit bit explicit and align the 24-bit
  // significand to the narrow subnormal unit 2^(1-Bias-MantBits).
  //
  //   value = 1.MMM...M * 2^(e-127) = m * 2^(e-150),   m = 1MMMMMMMMMMMMMMMMMMMMMMM (24 bits)
  //   code  = value / 2^(1-Bias-MantBits) = m >> (151 - Bias - MantBits - e)   (RNE)
  const uint32_t m = (abs_bits & 0x007fffffu) | 0x00800000u;
  return uint32_t(shift_right_rne(m, unsigned(151 - Bias - MantBits) - e));
}

}  // namespace mixtrain::detail
