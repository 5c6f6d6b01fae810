// Tensor: creation, views (slice, transpose, reshape), copies and casts between every dtype pair,
// seeded init, and the typed errors for impossible shapes.
#include "mixtrain/tensor/tensor.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

using namespace mixtrain;

TEST(Tensor, EmptyZerosShapesStrides) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::bf16);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_TRUE(t.is_contiguous());
  for (double v : t.to_doubles()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(t.to_string(), "bf16(2, 3, 4)");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kTensorAlignment, 0u);
}

TEST(Tensor, SliceTransposeSelectAreViews) {
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i) v[i] = i;
  Tensor t = Tensor::from_vector(v, {3, 4}, DType::f32);
  Tensor s = t.slice(1, 1, 3);  // columns 1, 2
  EXPECT_EQ(s.shape(), Shape({3, 2}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  Tensor tr = t.transpose(0, 1);
  EXPECT_EQ(tr.shape(), Shape({4, 3}));
  EXPECT_EQ(tr.at({1, 2}), 9.0);
  EXPECT_EQ(t.select(0, 2).to_doubles(), (std::vector<double>{8, 9, 10, 11}));
  EXPECT_EQ(t.slice(0, 0, 3, 2).to_doubles(), (std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11}));
  // Writing through a view changes the base.
  Tensor col = t.slice(1, 0, 1);
  col.fill(-1);
  EXPECT_EQ(t.at({2, 0}), -1.0);
  EXPECT_EQ(t.at({2, 1}), 9.0);
}

TEST(Tensor, ReshapeNeedsContiguous) {
  Tensor t = Tensor::zeros({4, 6}, DType::f32);
  EXPECT_EQ(t.reshape({2, -1, 3}).shape(), Shape({2, 4, 3}));
  EXPECT_THROW(t.reshape({5, 5}), ShapeError);
  EXPECT_THROW(t.reshape({-1, -1}), ShapeError);
  EXPECT_THROW(t.transpose(0, 1).reshape({24}), ShapeError);
  EXPECT_EQ(t.transpose(0, 1).contiguous().reshape({24}).numel(), 24);
  EXPECT_EQ(t.unsqueeze(0).shape(), Shape({1, 4, 6}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), Shape({4, 6, 1}));
}

TEST(Tensor, CastBetweenEveryPairRoundTripsRepresentableValues) {
  // Small integers and halves are exact in every float format (E4M3 holds up to 448, 3 mantissa
  // bits: 0..8 in steps of 0.5 are exact).
  std::vector<double> v = {0, 0.5, 1, 1.5, -2, 3, -4, 8, -0.0};
  const DType all[] = {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2, DType::f64};
  for (DType a : all)
    for (DType b : all) {
      Tensor x = Tensor::from_vector(v, {3, 3}, a);
      Tensor y = x.to(b);
      EXPECT_EQ(y.dtype(), b);
      Tensor z = y.to(DType::f64);
      const auto back = z.to_doubles();
      for (size_t i = 0; i < v.size(); ++i)
        EXPECT_EQ(back[i], v[i]) << dtype_name(a) << "->" << dtype_name(b) << " at " << i;
      EXPECT_TRUE(std::signbit(back[8])) << "-0 kept " << dtype_name(a) << "->" << dtype_name(b);
    }
}

TEST(Tensor, CastRoundsToNearestEven) {
  // 1 + 2^-8 is exactly half way between bf16 neighbours 1 and 1 + 2^-7: ties to even -> 1.
  // 1 + 3*2^-8 is half way between 1+2^-7 and 1+2^-6: ties to even -> 1 + 2^-6.
  Tensor x = Tensor::from_vector({1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8)}, {2}, DType::f32);
  const auto r = x.to(DType::bf16).to_doubles();
  EXPECT_EQ(r[0], 1.0);
  EXPECT_EQ(r[1], 1 + std::ldexp(1.0, -6));
}

TEST(Tensor, StridedCopyAndCast) {
  Tensor a = Tensor::rand_uniform({5, 7}, DType::f32, 3);
  Tensor at = a.transpose(0, 1);  // (7, 5), non-contiguous
  Tensor c = at.to(DType::bf16);
  EXPECT_TRUE(c.is_contiguous());
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_NEAR(c.at({i, j}), a.at({j, i}), std::fabs(a.at({j, i})) * 0.004 + 1e-6);
  // Copy into a strided destination.
  Tensor big = Tensor::zeros({7, 8}, DType::f16);
  Tensor dst = big.slice(1, 2, 7);
  dst.copy_from(at);
  EXPECT_EQ(big.at({0, 0}), 0.0);
  EXPECT_NEAR(big.at({3, 4}), a.at({2, 3}), std::fabs(a.at({2, 3})) * 0.001 + 1e-6);
  EXPECT_THROW(dst.copy_from(a), ShapeError);
}

TEST(Tensor, SeededInitIsDeterministicAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto a = Tensor::randn({300000}, DType::f32, 42).to_floats();
  omp_set_num_threads(2);
  const auto b = Tensor::randn({300000}, DType::f32, 42).to_floats();
  const auto c = Tensor::randn({300000}, DType::f32, 43).to_floats();
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, var = 0;
  for (float x : a) mean += x;
  mean /= a.size();
  for (float x : a) var += (x - mean) * (x - mean);
  var /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.01);  // 5 sigma of the sample mean is 0.009
  EXPECT_NEAR(var, 1.0, 0.02);
  const auto u = Tensor::rand_uniform({1000}, DType::f32, 1, -3.f, 5.f).to_floats();
  for (float x : u) {
    EXPECT_GE(x, -3.f);
    EXPECT_LT(x, 5.f);
  }
}

TEST(Tensor, ImpossibleShapesThrowTypedErrors) {
  EXPECT_THROW(Tensor::empty({-1, 3}, DType::f32), ShapeError);
  EXPECT_THROW(Tensor::empty({INT64_MAX / 2, 4}, DType::f32), ShapeError);
  EXPECT_THROW(Tensor::empty({1LL << 62}, DType::f32), ShapeError);  // bytes overflow
  EXPECT_THROW(Tensor::empty({1, 1, 1, 1, 1, 1, 1}, DType::f32), ShapeError);
  Tensor t = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_THROW(t.slice(1, 2, 5), ShapeError);
  EXPECT_THROW(t.transpose(0, 2), ShapeError);
  EXPECT_THROW(t.data<bf16>(), DTypeError);
  EXPECT_THROW(t.item(), ShapeError);
  EXPECT_THROW(Tensor().raw_data(), ArgumentError);
  EXPECT_THROW(Tensor::from_vector({1, 2, 3}, {2, 2}, DType::f32), ShapeError);
  EXPECT_THROW(parse_dtype("float8"), ArgumentError);
  try {
    t.slice(1, 2, 5);
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("f32(2, 3)"), std::string::npos) << e.what();
  }
}

TEST(Tensor, ZeroSizedTensors) {
  Tensor t = Tensor::zeros({0, 5}, DType::bf16);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.to_doubles().empty());
  Tensor u = t.to(DType::f32);
  EXPECT_EQ(u.shape(), Shape({0, 5}));
}
