// bf16 scalar conversions, bit for bit: every 16-bit pattern round-trips, a table of boundary
// cases with the expected bits written out, and random/boundary floats against the slow
// double-arithmetic reference in format_reference.h.
#include "mixtrain/numeric/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "format_reference.h"

namespace mixtrain {
namespace {

static_assert(std::is_trivially_copyable_v<bf16> && std::is_standard_layout_v<bf16>);
static_assert(!std::is_convertible_v<float, bf16> && !std::is_convertible_v<uint16_t, bf16>);
static_assert(!std::is_convertible_v<bf16, float> && !std::is_convertible_v<bf16, uint16_t>);
static_assert(!std::is_constructible_v<bf16, uint16_t> && !std::is_constructible_v<bf16, float>);
static_assert(bf16_from_f32(1.0f).bits() == 0x3f80);  // usable in constant expressions
static_assert(f32_from_bf16(bf16::from_bits(0xc040)) == -3.0f);

uint16_t to_bits(uint32_t f32_bits) { return bf16_from_f32(std::bit_cast<float>(f32_bits)).bits(); }
bool is_nan16(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

TEST(Bf16, AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = f32_from_bf16(bf16::from_bits(uint16_t(b)));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16) << "widening is a shift";
    const uint16_t back = bf16_from_f32(f).bits();
    if (is_nan16(uint16_t(b))) {
      // Same sign and payload, made quiet.
      ASSERT_EQ(back, b | 0x0040) << std::hex << b;
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
    }
  }
}

TEST(Bf16, DecodesToTheFormula) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double want = test::decode(test::kBf16, b);
    const float got = f32_from_bf16(bf16::from_bits(uint16_t(b)));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
    } else {
      ASSERT_EQ(double(got), want) << std::hex << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << b;
    }
  }
}

struct Case {
  uint32_t f32;
  uint16_t bf16;
  const char* what;
};

TEST(Bf16, BoundaryTable) {
  const Case cases[] = {
      {0x3f800000, 0x3f80, "1.0 exact"},
      {0x3f808000, 0x3f80, "tie, lower neighbour even: down"},
      {0x3f818000, 0x3f82, "tie, lower neighbour odd: up"},
      {0x3f807fff, 0x3f80, "just below the tie: down"},
      {0x3f808001, 0x3f81, "just above the tie: up"},
      {0xbf818000, 0xbf82, "negative tie to even (magnitude up)"},
      {0x3fffffff, 0x4000, "mantissa carry bumps the exponent"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x00000001, 0x0000, "smallest fp32 subnormal -> +0"},
      {0x80000001, 0x8000, "smallest negative fp32 subnormal -> -0"},
      {0x00007fff, 0x0000, "just below half the smallest bf16 subnormal -> 0"},
      {0x00008000, 0x0000, "exactly half the smallest subnormal: tie to even 0"},
      {0x00008001, 0x0001, "just above half: smallest subnormal"},
      {0x00010000, 0x0001, "smallest subnormal 2^-133"},
      {0x00018000, 0x0002, "subnormal tie, odd: up"},
      {0x007f0000, 0x007f, "largest subnormal"},
      {0x007f8000, 0x0080, "largest subnormal tie: up into the smallest normal"},
      {0x007fffff, 0x0080, "largest fp32 subnormal -> smallest normal"},
      {0x00800000, 0x0080, "smallest normal 2^-126"},
      {0x7f7f0000, 0x7f7f, "max finite 3.3895314e38"},
      {0x7f7f7fff, 0x7f7f, "largest value that does not round to inf"},
      {0x7f7f8000, 0x7f80, "first value that rounds to inf (tie, odd)"},
      {0x7f7fffff, 0x7f80, "FLT_MAX -> inf"},
      {0xff7f8000, 0xff80, "-> -inf"},
      {0x7f800000, 0x7f80, "+inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7fc00000, 0x7fc0, "canonical quiet NaN"},
      {0xffc00000, 0xffc0, "negative quiet NaN"},
      {0x7f800001, 0x7fc0, "signaling NaN with low payload: quieted, payload lost"},
      {0x7fa00000, 0x7fe0, "signaling NaN: quieted, top payload kept"},
      {0x7f810000, 0x7fc1, "signaling NaN, payload bit 0 of bf16 kept"},
      {0xffc12345, 0xffc1, "negative quiet NaN: truncated payload, never rounded"},
      {0x7fffffff, 0x7fff, "all-ones NaN does not round over into the sign"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(to_bits(c.f32), c.bf16) << c.what << " (input 0x" << std::hex << c.f32 << ")";
  }
}

// Expected bits per the double-arithmetic reference; NaN per the documented quieting rule.
uint16_t reference_bits(uint32_t x) {
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);
  if ((x & 0x7fffffff) == 0x7f800000) return uint16_t(x >> 16);
  return uint16_t(test::expected_bits(test::kBf16, std::bit_cast<float>(x), 0x7f80));
}

TEST(Bf16, MatchesSlowReferenceOnRandomAndBoundaryFloats) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::vector<uint32_t> inputs;
  // Every bf16 value, its neighbours +-1 ulp of fp32, and the ties and near-ties between them.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      inputs.push_back((b << 16) | low);
    }
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 3'000'000; ++i) inputs.push_back(uint32_t(rng()));
  for (uint32_t x : inputs) {
    ASSERT_EQ(to_bits(x), reference_bits(x)) << "input 0x" << std::hex << x;
  }
}

}  // namespace
}  // namespace mixtrain
