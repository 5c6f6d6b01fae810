// Slow, obvious reference for the number-format tests: decode a bit pattern with the textbook
// formula and round a value to a format with double arithmetic (nearbyint on a scaled value),
// sharing no code with the integer bit manipulation under test.
#pragma once
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mixtrain::test {

// A binary format described by its field widths; has_inf = IEEE-style all-ones exponent.
struct Format {
  int exp_bits, mant_bits, bias;
  bool ieee_specials;  // false: OCP E4M3 (only S.1111.111 is NaN, no inf)
  double max_finite() const {
    const int emax = ieee_specials ? (1 << exp_bits) - 2 - bias : (1 << exp_bits) - 1 - bias;
    const double mant = ieee_specials ? 2.0 - std::ldexp(1.0, -mant_bits)
                                      : 2.0 - std::ldexp(2.0, -mant_bits);  // top mantissa is NaN
    return std::ldexp(mant, emax);
  }
  int min_normal_exp() const { return 1 - bias; }
};

inline constexpr Format kBf16{8, 7, 127, true};
inline constexpr Format kFp16{5, 10, 15, true};
inline constexpr Format kE4M3{4, 3, 7, false};
inline constexpr Format kE5M2{5, 2, 15, true};

// (-1)^s * 2^(e-bias) * (1 + m/2^M), or the subnormal 2^(1-bias) * m/2^M; inf/NaN as flagged.
inline double decode(const Format& f, uint32_t bits) {
  const uint32_t m = bits & ((1u << f.mant_bits) - 1);
  const uint32_t e = (bits >> f.mant_bits) & ((1u << f.exp_bits) - 1);
  const bool neg = (bits >> (f.mant_bits + f.exp_bits)) & 1;
  const uint32_t emax_field = (1u << f.exp_bits) - 1;
  double v;
  if (e == emax_field && f.ieee_specials) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == emax_field && m == (1u << f.mant_bits) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(double(m), f.min_normal_exp() - f.mant_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(double(m), -f.mant_bits), int(e) - f.bias);
  }
  return neg ? -v : v;
}

// Rounds finite x to the format's precision, ties to even (the default FE_TONEAREST mode), with
// an unbounded exponent on top; the caller handles overflow.
inline double round_to(const Format& f, double x) {
  if (x == 0) return x;
  int e2 = 0;
  std::frexp(x, &e2);  // |x| in [2^(e2-1), 2^e2)
  const int lead = std::max(e2 - 1, f.min_normal_exp());
  const double ulp = std::ldexp(1.0, lead - f.mant_bits);
  return std::copysign(std::nearbyint(x / ulp) * ulp, x);
}

// The bit pattern of a value known to be representable (finite, rounded by round_to).
inline uint32_t encode_exact(const Format& f, double r) {
  const uint32_t sign = std::signbit(r) ? 1u << (f.exp_bits + f.mant_bits) : 0u;
  const double a = std::fabs(r);
  if (a == 0) return sign;
  int e2 = 0;
  std::frexp(a, &e2);
  const int lead = e2 - 1;
  if (lead < f.min_normal_exp()) {
    return sign | uint32_t(std::ldexp(a, f.mant_bits - f.min_normal_exp()));
  }
  const uint32_t m = uint32_t(std::ldexp(a, f.mant_bits - lead)) - (1u << f.mant_bits);
  return sign | (uint32_t(lead + f.bias) << f.mant_bits) | m;
}

// Expected bits of rounding a finite fp32 x to the format; `overflow_bits` is what values past
// max finite become (inf, NaN or the saturated max, with the sign added here).
inline uint32_t expected_bits(const Format& f, float x, uint32_t overflow_bits) {
  const double r = round_to(f, double(x));
  if (std::fabs(r) > f.max_finite()) {
    return (std::signbit(x) ? 1u << (f.exp_bits + f.mant_bits) : 0u) | overflow_bits;
  }
  return encode_exact(f, r);
}

}  // namespace mixtrain::test
