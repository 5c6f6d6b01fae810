// The element-wise sums of the data-parallel reductions: fp32 exact, bf16 and fp16 widened to
// fp32, added and rounded back to nearest even (ties both ways), inf and NaN carried through.
#include "dist/reduce_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mixtrain/core/error.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain::dist {
namespace {

TEST(ReduceSum, Fp32IsThePlainSum) {
  const std::vector<float> in{1.f, -2.5f, 1e-8f, 3.f};
  std::vector<float> io{2.f, 2.5f, 1.f, INFINITY};
  sum_into(in.data(), io.data(), 4, DType::f32);
  EXPECT_EQ(io[0], 3.f);
  EXPECT_EQ(io[1], 0.f);
  EXPECT_EQ(io[2], 1.f + 1e-8f);
  EXPECT_TRUE(std::isinf(io[3]));
}

TEST(ReduceSum, Bf16AddsInFp32AndRoundsToNearestEven) {
  // bf16 has 8 significand bits: near 1 the spacing is 2^-7, so x + 2^-8 is a tie.
  const float h = std::ldexp(1.f, -8);
  const std::vector<bf16> in{bf16_from_f32(1.f), bf16_from_f32(1.f + 2 * h), bf16_from_f32(3.f),
                             bf16_from_f32(INFINITY), bf16_from_f32(NAN)};
  std::vector<bf16> io{bf16_from_f32(h), bf16_from_f32(h), bf16_from_f32(-1.f), bf16_from_f32(1.f),
                       bf16_from_f32(1.f)};
  sum_into(in.data(), io.data(), 5, DType::bf16);
  EXPECT_EQ(f32_from_bf16(io[0]), 1.f);          // tie to the even significand (1.0)
  EXPECT_EQ(f32_from_bf16(io[1]), 1.f + 4 * h);  // 1 + 3*2^-8: tie to 1 + 2^-6 (even), not 1 + 2^-7
  EXPECT_EQ(f32_from_bf16(io[2]), 2.f);
  EXPECT_TRUE(std::isinf(f32_from_bf16(io[3])));
  EXPECT_TRUE(std::isnan(f32_from_bf16(io[4])));
}

TEST(ReduceSum, Fp16AddsInFp32AndRoundsToNearestEven) {
  // fp16 spacing in [2048, 4096) is 2: 2048 + 1 ties down to 2048, 2050 + 1 up to 2052.
  const std::vector<fp16> in{fp16_from_f32(2048.f), fp16_from_f32(2050.f), fp16_from_f32(60000.f)};
  std::vector<fp16> io{fp16_from_f32(1.f), fp16_from_f32(1.f), fp16_from_f32(60000.f)};
  sum_into(in.data(), io.data(), 3, DType::f16);
  EXPECT_EQ(f32_from_fp16(io[0]), 2048.f);
  EXPECT_EQ(f32_from_fp16(io[1]), 2052.f);
  EXPECT_TRUE(std::isinf(f32_from_fp16(io[2])));  // 120000 overflows fp16: the scaler must see it
}

TEST(ReduceSum, OtherDtypesAreRefusedByName) {
  std::vector<int32_t> a{1}, b{2};
  try {
    sum_into(a.data(), b.data(), 1, DType::i32);
    FAIL() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixtrain::dist
