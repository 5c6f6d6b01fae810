// fp16 scalar conversions, bit for bit: every 16-bit pattern decodes to the IEEE formula and
// round-trips, a boundary table with expected bits, and random/boundary floats against the slow
// double-arithmetic reference in format_reference.h.
#include "mixtrain/numeric/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "format_reference.h"

namespace mixtrain {
namespace {

static_assert(std::is_trivially_copyable_v<fp16> && std::is_standard_layout_v<fp16>);
static_assert(!std::is_convertible_v<float, fp16> && !std::is_convertible_v<uint16_t, fp16>);
static_assert(!std::is_convertible_v<fp16, float> && !std::is_constructible_v<fp16, uint16_t>);
static_assert(fp16_from_f32(1.0f).bits() == 0x3c00);
static_assert(f32_from_fp16(fp16::from_bits(0x0001)) == 0x1p-24f);

uint16_t to_bits(uint32_t f32_bits) { return fp16_from_f32(std::bit_cast<float>(f32_bits)).bits(); }
bool is_nan16(uint16_t b) { return (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0; }

TEST(Fp16, AllPatternsDecodeToTheFormulaAndRoundTrip) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const fp16 h = fp16::from_bits(uint16_t(b));
    const float f = f32_from_fp16(h);
    const double want = test::decode(test::kFp16, b);
    const uint16_t back = fp16_from_f32(f).bits();
    if (is_nan16(uint16_t(b))) {
      ASSERT_TRUE(std::isnan(f));
      // Widening keeps sign and payload and sets the quiet bit, as VCVTPH2PS does.
      ASSERT_EQ(std::bit_cast<uint32_t>(f), ((b & 0x8000u) << 16) | 0x7fc00000u | ((b & 0x3ffu) << 13))
          << std::hex << b;
      ASSERT_EQ(back, b | 0x0200) << std::hex << b;
    } else {
      ASSERT_EQ(double(f), want) << std::hex << b;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << b;
      ASSERT_EQ(back, b) << std::hex << b;
    }
  }
}

struct Case {
  uint32_t f32;
  uint16_t fp16;
  const char* what;
};

TEST(Fp16, BoundaryTable) {
  const Case cases[] = {
      {0x3f800000, 0x3c00, "1.0"},
      {0x3f801000, 0x3c00, "1 + 2^-11: tie, lower even: down"},
      {0x3f803000, 0x3c02, "1 + 3*2^-11: tie, lower odd: up"},
      {0x3f800fff, 0x3c00, "just below the tie"},
      {0x3f801001, 0x3c01, "just above the tie"},
      {0xbf803000, 0xbc02, "negative tie to even"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x00000001, 0x0000, "fp32 subnormal -> 0"},
      {0x80400000, 0x8000, "negative fp32 subnormal -> -0"},
      {0x33800000, 0x0001, "smallest subnormal 2^-24"},
      {0x32ffffff, 0x0000, "just below half the smallest subnormal -> 0"},
      {0x33000000, 0x0000, "2^-25, exactly half: tie to even 0"},
      {0x33000001, 0x0001, "just above half: smallest subnormal"},
      {0xb3000001, 0x8001, "negative, just above half"},
      {0x33c00000, 0x0002, "1.5 * 2^-24: tie, odd: up to 2"},
      {0x34200000, 0x0002, "2.5 * 2^-24: tie, even: down to 2"},
      {0x387fc000, 0x03ff, "largest subnormal 1023 * 2^-24"},
      {0x387fe000, 0x0400, "1023.5 * 2^-24: tie, odd: up to the smallest normal"},
      {0x387fdfff, 0x03ff, "just below that tie"},
      {0x38800000, 0x0400, "smallest normal 2^-14"},
      {0x477fe000, 0x7bff, "max finite 65504"},
      {0x477fefff, 0x7bff, "largest value that does not round to inf"},
      {0x477ff000, 0x7c00, "65520: first value that rounds to inf"},
      {0xc77ff000, 0xfc00, "-65520 -> -inf"},
      {0x47800000, 0x7c00, "65536 -> inf"},
      {0x7f7fffff, 0x7c00, "FLT_MAX -> inf"},
      {0x7f800000, 0x7c00, "+inf"},
      {0xff800000, 0xfc00, "-inf"},
      {0x7fc00000, 0x7e00, "quiet NaN"},
      {0xffc00000, 0xfe00, "negative quiet NaN"},
      {0x7f800001, 0x7e00, "signaling NaN, low payload: quieted, payload lost"},
      {0x7fa00000, 0x7f00, "signaling NaN: quieted, top payload kept"},
      {0xff802000, 0xfe01, "negative signaling NaN, lowest kept payload bit"},
      {0x7fffffff, 0x7fff, "all-ones NaN: payload truncated, never rounded"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(to_bits(c.f32), c.fp16) << c.what << " (input 0x" << std::hex << c.f32 << ")";
  }
}

uint16_t reference_bits(uint32_t x) {
  const uint32_t a = x & 0x7fffffff;
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  if (a > 0x7f800000) return uint16_t(sign | 0x7e00 | ((a >> 13) & 0x3ff));
  if (a == 0x7f800000) return uint16_t(sign | 0x7c00);
  return uint16_t(test::expected_bits(test::kFp16, std::bit_cast<float>(x), 0x7c00));
}

TEST(Fp16, MatchesSlowReferenceOnRandomAndBoundaryFloats) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::vector<uint32_t> inputs;
  // Every fp16 value's exact fp32, +-1 fp32 ulp around it, and the ties and near-ties above it.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = f32_from_fp16(fp16::from_bits(uint16_t(b)));
    if (std::isnan(f)) continue;
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const float next = f32_from_fp16(fp16::from_bits(uint16_t(b + 1)));
    const uint32_t mid = std::bit_cast<uint32_t>(float((double(f) + double(next)) / 2));
    for (uint32_t v : {x, x - 1, x + 1, mid, mid - 1, mid + 1}) inputs.push_back(v);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2'000'000; ++i) inputs.push_back(uint32_t(rng()));
  // Random values in fp16's own range (exponents -30..17), where rounding is non-trivial.
  std::uniform_int_distribution<int> exp_dist(-30, 17);
  for (int i = 0; i < 2'000'000; ++i) {
    const float v = std::ldexp(1.0f + float(rng() & 0x7fffff) * 0x1p-23f, exp_dist(rng));
    inputs.push_back(std::bit_cast<uint32_t>(i % 2 ? -v : v));
  }
  for (uint32_t x : inputs) {
    ASSERT_EQ(to_bits(x), reference_bits(x)) << "input 0x" << std::hex << x;
  }
}

}  // namespace
}  // namespace mixtrain
