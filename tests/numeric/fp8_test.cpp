// OCP FP8 (E4M3, E5M2) scalar conversions: all 256 patterns of each decode to the spec's
// formula and round-trip, the boundary values of both overflow modes, and random floats against
// the slow double-arithmetic reference.
#include "mixtrain/numeric/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <type_traits>

#include "format_reference.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain {
namespace {

static_assert(std::is_trivially_copyable_v<fp8_e4m3> && std::is_standard_layout_v<fp8_e4m3>);
static_assert(std::is_trivially_copyable_v<fp8_e5m2> && std::is_standard_layout_v<fp8_e5m2>);
static_assert(!std::is_convertible_v<float, fp8_e4m3> && !std::is_constructible_v<fp8_e5m2, uint8_t>);
static_assert(fp8_e4m3_from_f32(448.0f).bits() == 0x7e);
static_assert(f32_from_fp8_e5m2(fp8_e5m2::from_bits(0x7b)) == 57344.0f);

constexpr Fp8Overflow kNan = Fp8Overflow::nan;
constexpr Fp8Overflow kSat = Fp8Overflow::saturate;

uint8_t e4m3(float f, Fp8Overflow o = kNan) { return fp8_e4m3_from_f32(f, o).bits(); }
uint8_t e5m2(float f, Fp8Overflow o = kNan) { return fp8_e5m2_from_f32(f, o).bits(); }

TEST(Fp8E4M3, AllPatternsDecodeToTheSpecAndRoundTrip) {
  int nans = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = f32_from_fp8_e4m3(fp8_e4m3::from_bits(uint8_t(b)));
    const double want = test::decode(test::kE4M3, b);
    if (std::isnan(want)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(std::signbit(f), b >= 0x80);
      ASSERT_EQ(e4m3(f), b);  // the one NaN pattern per sign
      ASSERT_EQ(e4m3(f, kSat), b);
    } else {
      ASSERT_EQ(double(f), want) << std::hex << b;
      ASSERT_EQ(std::signbit(f), b >= 0x80) << std::hex << b;
      ASSERT_EQ(e4m3(f), b) << std::hex << b;
      ASSERT_EQ(e4m3(f, kSat), b) << std::hex << b;
    }
  }
  EXPECT_EQ(nans, 2);  // S.1111.111 only: no infinities
  EXPECT_EQ(f32_from_fp8_e4m3(fp8_e4m3::from_bits(0x7e)), 448.0f);
  EXPECT_EQ(f32_from_fp8_e4m3(fp8_e4m3::from_bits(0x01)), 0x1p-9f);
  EXPECT_EQ(f32_from_fp8_e4m3(fp8_e4m3::from_bits(0x08)), 0x1p-6f);
}

TEST(Fp8E5M2, AllPatternsDecodeToTheSpecAndRoundTrip) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = f32_from_fp8_e5m2(fp8_e5m2::from_bits(uint8_t(b)));
    const double want = test::decode(test::kE5M2, b);
    // E5M2 is the top byte of an fp16, so it must widen exactly like that fp16.
    ASSERT_EQ(std::bit_cast<uint32_t>(f),
              std::bit_cast<uint32_t>(f32_from_fp16(fp16::from_bits(uint16_t(b << 8)))));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(e5m2(f), b | 0x02) << std::hex << b;  // sign and payload kept, made quiet
    } else {
      ASSERT_EQ(double(f), want) << std::hex << b;
      ASSERT_EQ(std::signbit(f), b >= 0x80) << std::hex << b;
      ASSERT_EQ(e5m2(f), b) << std::hex << b;
      if (!std::isinf(f)) {
        ASSERT_EQ(e5m2(f, kSat), b) << std::hex << b;
      }
    }
  }
  EXPECT_EQ(f32_from_fp8_e5m2(fp8_e5m2::from_bits(0x7c)), INFINITY);
  EXPECT_EQ(f32_from_fp8_e5m2(fp8_e5m2::from_bits(0x01)), 0x1p-16f);
  EXPECT_EQ(f32_from_fp8_e5m2(fp8_e5m2::from_bits(0x04)), 0x1p-14f);
}

TEST(Fp8E4M3, Boundaries) {
  const float after_464 = std::nextafter(464.0f, INFINITY);
  EXPECT_EQ(e4m3(448.0f), 0x7e);
  EXPECT_EQ(e4m3(464.0f), 0x7e) << "tie between 448 (even) and 480: 448";
  EXPECT_EQ(e4m3(464.0f, kSat), 0x7e);
  EXPECT_EQ(e4m3(after_464), 0x7f) << "first overflow -> NaN";
  EXPECT_EQ(e4m3(after_464, kSat), 0x7e) << "first overflow saturates to 448";
  EXPECT_EQ(e4m3(480.0f), 0x7f);
  EXPECT_EQ(e4m3(480.0f, kSat), 0x7e);
  EXPECT_EQ(e4m3(-480.0f), 0xff);
  EXPECT_EQ(e4m3(-480.0f, kSat), 0xfe);
  EXPECT_EQ(e4m3(1e30f, kSat), 0x7e);
  EXPECT_EQ(e4m3(INFINITY), 0x7f) << "no inf in E4M3";
  EXPECT_EQ(e4m3(INFINITY, kSat), 0x7e) << "__NV_SATFINITE clamps inf";
  EXPECT_EQ(e4m3(-INFINITY, kSat), 0xfe);
  EXPECT_EQ(e4m3(NAN), 0x7f);
  EXPECT_EQ(e4m3(NAN, kSat), 0x7f) << "NaN stays NaN when saturating";
  EXPECT_EQ(e4m3(-NAN), 0xff);
  EXPECT_EQ(e4m3(std::bit_cast<float>(0x7f800001u)), 0x7f) << "signaling NaN";
  EXPECT_EQ(e4m3(0.0f), 0x00);
  EXPECT_EQ(e4m3(-0.0f), 0x80);
  EXPECT_EQ(e4m3(1.0f), 0x38);
  EXPECT_EQ(e4m3(1.0625f), 0x38) << "tie, lower even: down";
  EXPECT_EQ(e4m3(1.1875f), 0x3a) << "tie, lower odd: up";
  EXPECT_EQ(e4m3(0x1p-9f), 0x01) << "smallest subnormal";
  EXPECT_EQ(e4m3(0x1p-10f), 0x00) << "half the smallest subnormal: tie to even 0";
  EXPECT_EQ(e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(e4m3(-std::nextafter(0x1p-10f, 0.0f)), 0x80) << "just below half -> -0";
  EXPECT_EQ(e4m3(3 * 0x1p-10f), 0x02) << "subnormal tie, odd: up";
  EXPECT_EQ(e4m3(7 * 0x1p-9f), 0x07) << "largest subnormal";
  EXPECT_EQ(e4m3(7.5f * 0x1p-9f), 0x08) << "tie into the smallest normal";
  EXPECT_EQ(e4m3(0x1p-6f), 0x08) << "smallest normal";
}

TEST(Fp8E5M2, Boundaries) {
  EXPECT_EQ(e5m2(57344.0f), 0x7b);
  EXPECT_EQ(e5m2(std::nextafter(61440.0f, 0.0f)), 0x7b) << "largest value that stays finite";
  EXPECT_EQ(e5m2(61440.0f), 0x7c) << "tie between 57344 (odd) and 65536: inf";
  EXPECT_EQ(e5m2(61440.0f, kSat), 0x7b);
  EXPECT_EQ(e5m2(-61440.0f), 0xfc);
  EXPECT_EQ(e5m2(-61440.0f, kSat), 0xfb);
  EXPECT_EQ(e5m2(INFINITY), 0x7c);
  EXPECT_EQ(e5m2(INFINITY, kSat), 0x7b);
  EXPECT_EQ(e5m2(-INFINITY), 0xfc);
  EXPECT_EQ(e5m2(NAN), 0x7e);
  EXPECT_EQ(e5m2(NAN, kSat), 0x7e);
  EXPECT_EQ(e5m2(-NAN), 0xfe);
  EXPECT_EQ(e5m2(std::bit_cast<float>(0x7fa00000u)), 0x7f) << "signaling NaN: quiet, payload kept";
  EXPECT_EQ(e5m2(std::bit_cast<float>(0x7f800001u)), 0x7e) << "signaling NaN, payload lost";
  EXPECT_EQ(e5m2(-0.0f), 0x80);
  EXPECT_EQ(e5m2(1.125f), 0x3c) << "tie, lower even: down";
  EXPECT_EQ(e5m2(1.375f), 0x3e) << "tie, lower odd: up";
  EXPECT_EQ(e5m2(0x1p-16f), 0x01) << "smallest subnormal";
  EXPECT_EQ(e5m2(0x1p-17f), 0x00) << "half of it: tie to even 0";
  EXPECT_EQ(e5m2(std::nextafter(0x1p-17f, 1.0f)), 0x01);
  EXPECT_EQ(e5m2(3 * 0x1p-16f), 0x03) << "largest subnormal";
  EXPECT_EQ(e5m2(3.5f * 0x1p-16f), 0x04) << "tie into the smallest normal";
  EXPECT_EQ(e5m2(0x1p-14f), 0x04) << "smallest normal";
}

template <class Encode>
void check_against_reference(const test::Format& fmt, Encode encode, uint32_t nan_bits,
                             uint32_t overflow_nan_mode, uint32_t overflow_sat_mode) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> exp_dist(-24, 20);
  for (int i = 0; i < 2'000'000; ++i) {
    // Half the inputs are arbitrary bit patterns, half lie in the format's range.
    float f = i % 2 ? std::bit_cast<float>(uint32_t(rng()))
                    : std::ldexp(1.0f + float(rng() & 0x7fffff) * 0x1p-23f, exp_dist(rng));
    if (i % 4 == 0) f = -f;
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) {
      for (Fp8Overflow o : {kNan, kSat}) {
        const uint32_t got = encode(f, o);
        ASSERT_TRUE(std::isnan(test::decode(fmt, got))) << std::hex << x;
        ASSERT_EQ(got & 0x80, (x >> 24) & 0x80) << std::hex << x;
        ASSERT_EQ(got & nan_bits, nan_bits) << "quiet NaN pattern, input 0x" << std::hex << x;
      }
      continue;
    }
    const uint32_t want_nan_mode = std::isinf(f) ? ((x >> 24) & 0x80) | overflow_nan_mode
                                                 : test::expected_bits(fmt, f, overflow_nan_mode);
    const uint32_t want_sat = std::isinf(f) ? ((x >> 24) & 0x80) | overflow_sat_mode
                                            : test::expected_bits(fmt, f, overflow_sat_mode);
    ASSERT_EQ(encode(f, kNan), want_nan_mode) << "input 0x" << std::hex << x;
    ASSERT_EQ(encode(f, kSat), want_sat) << "input 0x" << std::hex << x;
  }
}

TEST(Fp8E4M3, MatchesSlowReference) {
  check_against_reference(
      test::kE4M3, [](float f, Fp8Overflow o) { return uint32_t(e4m3(f, o)); }, 0x7f, 0x7f, 0x7e);
}

TEST(Fp8E5M2, MatchesSlowReference) {
  check_against_reference(
      test::kE5M2, [](float f, Fp8Overflow o) { return uint32_t(e5m2(f, o)); }, 0x7e, 0x7c, 0x7b);
}

}  // namespace
}  // namespace mixtrain
