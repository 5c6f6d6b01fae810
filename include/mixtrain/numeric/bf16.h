// bfloat16 storage type (1 sign, 8 exponent, 7 mantissa bits: fp32 with the low 16 bits dropped)
// and its scalar conversions to and from fp32. These scalar functions are the oracle that every
// bulk/SIMD conversion in convert.h is tested against bit for bit (STYLE lessons 5 and 6).
#pragma once
#include <bit>
#include <cstdint>

namespace mixtrain {

// A bf16 value. Not an integer and not a float: build one from bits with bf16::from_bits() or
// from a float with bf16_from_f32(); there are no implicit conversions either way.
struct bf16 {
  uint16_t bits_;  // public only to keep the type standard-layout; use bits()

  bf16() = default;  // user-declared, so bf16{0x3f80} does not compile (not an aggregate)
  static constexpr bf16 from_bits(uint16_t b) {
    bf16 r;
    r.bits_ = b;
    return r;
  }
  constexpr uint16_t bits() const { return bits_; }
  // Compares BITS, not values: +0 != -0 and a NaN equals itself. Use f32_from_bf16 for values.
  friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits_ == b.bits_; }
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2);

// fp32 -> bf16, round to nearest even; overflow gives +-inf; subnormals are rounded (not
// flushed); NaN stays NaN with its sign and top 7 payload bits, made quiet (the rule
// VCVTNEPS2BF16 follows, so the SIMD path can match bit for bit).
constexpr bf16 bf16_from_f32(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep the top half and set the quiet bit (mantissa bit 6).
    //
    //   f32:  S 11111111 1?PPPPPPPPPPPPPPPPPPPPPP
    //   bf16: S 11111111 1PPPPPP                    (bit 6 forced to 1)
    return bf16::from_bits(uint16_t((x >> 16) | 0x0040u));
  }
  // Round to nearest even by integer addition, then truncate:
  //
  //   f32:  S EEEEEEEE MMMMMMM L | RRRRRRRRRRRRRRRR     (L = lowest kept bit, R = dropped)
  //   add 0x7fff + L: R > 0x8000 carries into L; R == 0x8000 carries only if L is odd (ties to
  //   even). A carry out of the mantissa bumps the exponent; out of 0xFE it gives 0xFF with a
  //   zero mantissa, i.e. inf. Subnormals share fp32's exponent range, so they need no case.
  const uint32_t lsb = (x >> 16) & 1u;
  return bf16::from_bits(uint16_t((x + 0x7fffu + lsb) >> 16));
}

// bf16 -> fp32 is exact: put the 16 bits on top. NaNs keep their exact bits (signaling stays
// signaling), as in PyTorch and the AVX-512 shift path.
constexpr float f32_from_bf16(bf16 h) { return std::bit_cast<float>(uint32_t(h.bits()) << 16); }

}  // namespace mixtrain
