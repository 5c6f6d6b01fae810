// Every bad argument to gemm/matmul throws the right typed error with a message that names the op
// and the offending shapes, and leaves the output untouched.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace {

// Runs f, expects exception E whose message contains every one of `parts`.
template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << *parts.begin() << "'";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

Tensor T(Shape s, DType t = DType::f32) { return Tensor::zeros(s, t); }

TEST(gemm_errors, InnerDimsDiffer) {
  Tensor a = T({17, 5}, DType::bf16), b = T({6, 9}, DType::bf16), c = T({17, 9});
  expect_error<ShapeError>([&] { gemm(a, b, c); },
                           {"gemm: a bf16(17, 5) and b bf16(6, 9): inner dims differ (5 vs 6)"});
  GemmOptions opt;
  opt.trans_a = true;  // a^T is (5, 17): K = 17 vs 6
  expect_error<ShapeError>([&] { gemm(a, b, c, opt); },
                           {"gemm:", "a bf16(17, 5)^T", "inner dims differ (17 vs 6)"});
  expect_error<ShapeError>([&] { (void)matmul(a, b, false, false, DType::f32); },
                           {"matmul:", "inner dims differ"});
}

TEST(gemm_errors, WrongRank) {
  Tensor c = T({4, 4});
  expect_error<ShapeError>([&] { gemm(T({4}), T({4, 4}), c); }, {"gemm:", "a f32(4)", "2-D"});
  expect_error<ShapeError>([&] { gemm(T({2, 2, 4, 4}), T({4, 4}), c); }, {"gemm:", "a f32(2, 2, 4, 4)"});
  expect_error<ShapeError>([&] { gemm(T({4, 4}), T({4}), c); }, {"gemm:", "b f32(4)"});
  // a batched b with a 2-D a
  expect_error<ShapeError>([&] { gemm(T({4, 4}), T({2, 4, 4}), c); }, {"gemm:", "b is batched but a is not"});
  // c rank differs from the problem's
  Tensor c3 = T({1, 4, 4});
  expect_error<ShapeError>([&] { gemm(T({4, 4}), T({4, 4}), c3); }, {"gemm:", "give (4, 4)", "f32(1, 4, 4)"});
}

TEST(gemm_errors, DTypes) {
  Tensor c = T({3, 4});
  expect_error<DTypeError>(
      [&] {
        gemm(T({3, 5}, DType::bf16), T({5, 4}, DType::f16), c);
      },
      {"gemm: a bf16(3, 5) and b f16(5, 4): input dtypes differ"});
  expect_error<DTypeError>(
      [&] {
        gemm(T({3, 5}, DType::bf16), T({5, 4}, DType::f32), c);
      },
      {"input dtypes differ"});
  Tensor ia = Tensor::from_ints(std::vector<int32_t>(15, 1), {3, 5});
  Tensor ib = Tensor::from_ints(std::vector<int32_t>(20, 1), {5, 4});
  expect_error<DTypeError>([&] { gemm(ia, ib, c); }, {"gemm: a i32(3, 5)", "f32, bf16 or f16"});
  expect_error<DTypeError>(
      [&] {
        gemm(T({3, 5}, DType::f8_e4m3), T({5, 4}, DType::f8_e4m3), c);
      },
      {"gemm: a f8_e4m3(3, 5)"});
  Tensor ci = Tensor::from_ints(std::vector<int32_t>(12, 0), {3, 4});
  expect_error<DTypeError>([&] { gemm(T({3, 5}), T({5, 4}), ci); }, {"gemm:", "output c i32(3, 4)"});
  // f64 inputs need an f64 output (gradient checks are f64 end to end), and vice versa.
  expect_error<DTypeError>([&] { gemm(T({3, 5}, DType::f64), T({5, 4}, DType::f64), c); }, {"gemm:", "f64"});
  Tensor c64 = T({3, 4}, DType::f64);
  expect_error<DTypeError>([&] { gemm(T({3, 5}), T({5, 4}), c64); }, {"gemm:", "output c f64(3, 4)"});
  expect_error<DTypeError>(
      [&] {
        (void)matmul(T({3, 5}), T({5, 4}), false, false, DType::i32);
      },
      {"matmul:", "output dtype i32"});
}

TEST(gemm_errors, OutputShape) {
  Tensor a = T({17, 5}), b = T({5, 9}), c = T({17, 8});
  expect_error<ShapeError>([&] { gemm(a, b, c); },
                           {"gemm: a f32(17, 5) and b f32(5, 9) give (17, 9) but output c is f32(17, 8)"});
  Tensor cb = T({2, 17, 9});
  Tensor ab = T({3, 17, 5});
  expect_error<ShapeError>([&] { gemm(ab, b, cb); }, {"gemm:", "give (3, 17, 9)", "f32(2, 17, 9)"});
}

TEST(gemm_errors, BatchMismatch) {
  Tensor a = T({3, 4, 5}), b = T({2, 5, 6}), c = T({3, 4, 6});
  expect_error<ShapeError>([&] { gemm(a, b, c); },
                           {"gemm: a f32(3, 4, 5) and b f32(2, 5, 6): batch sizes differ (3 vs 2)"});
}

TEST(gemm_errors, Bias) {
  Tensor a = T({4, 5}), b = T({5, 9}), c = T({4, 9});
  Tensor short_bias = T({8});
  expect_error<ShapeError>([&] { gemm(a, b, c, {}, &short_bias); }, {"gemm:", "bias f32(8)", "(N) = (9)"});
  Tensor bias2d = T({1, 9});
  expect_error<ShapeError>([&] { gemm(a, b, c, {}, &bias2d); }, {"gemm:", "bias f32(1, 9)"});
  Tensor bf_bias = T({9}, DType::bf16);
  expect_error<DTypeError>([&] { gemm(a, b, c, {}, &bf_bias); }, {"gemm:", "bias bf16(9) must be f32"});
  Tensor undefined;
  expect_error<ArgumentError>([&] { gemm(a, b, c, {}, &undefined); }, {"gemm: bias is undefined"});
}

TEST(gemm_errors, Undefined) {
  Tensor u, a = T({4, 5}), b = T({5, 6}), c = T({4, 6});
  expect_error<ArgumentError>([&] { gemm(u, b, c); }, {"gemm: a is undefined"});
  expect_error<ArgumentError>([&] { gemm(a, u, c); }, {"gemm: b is undefined"});
  expect_error<ArgumentError>([&] { gemm(a, b, u); }, {"gemm: c is undefined"});
  expect_error<ArgumentError>([&] { (void)matmul(u, b, false, false, DType::f32); },
                              {"matmul: a is undefined"});
}

TEST(gemm_errors, UnsupportedLayout) {
  // Every other column of a (4, 10): neither of the last two dims has stride 1.
  Tensor wide = T({4, 10});
  Tensor a = wide.slice(1, 0, 10, 2);  // (4, 5) strides (10, 2)
  Tensor b = T({5, 6}), c = T({4, 6});
  expect_error<ShapeError>([&] { gemm(a, b, c); }, {"gemm:", "a f32(4, 5)", "unsupported layout"});
  Tensor cwide = T({4, 12});
  Tensor cs = cwide.slice(1, 0, 12, 2);  // (4, 6) strides (12, 2)
  expect_error<ShapeError>([&] { gemm(T({4, 5}), b, cs); }, {"gemm:", "c f32(4, 6)", "unsupported layout"});
}

TEST(gemm_errors, OutputOverlapsInput) {
  Tensor buf = T({8, 8});
  Tensor a = buf.slice(0, 0, 8);  // the whole buffer
  Tensor c = buf.slice(0, 0, 8);
  expect_error<ArgumentError>([&] { gemm(a, T({8, 8}), c); }, {"gemm:", "overlaps input a"});
}

TEST(gemm_errors, NonFiniteAlphaBeta) {
  Tensor a = T({4, 5}), b = T({5, 6}), c = T({4, 6});
  GemmOptions opt;
  opt.alpha = std::numeric_limits<float>::quiet_NaN();
  expect_error<ArgumentError>([&] { gemm(a, b, c, opt); }, {"gemm:", "alpha and beta must be finite"});
  opt.alpha = 1.f;
  opt.beta = std::numeric_limits<float>::infinity();
  expect_error<ArgumentError>([&] { gemm(a, b, c, opt); }, {"gemm:", "alpha and beta must be finite"});
}

// A failed check leaves c as it was.
TEST(gemm_errors, OutputUntouchedOnError) {
  Tensor a = T({4, 5}), b = T({6, 7});
  Tensor c = Tensor::full({4, 7}, DType::f32, 3.0);
  EXPECT_THROW(gemm(a, b, c), ShapeError);
  for (float v : c.to_floats()) EXPECT_EQ(v, 3.f);
}

}  // namespace
}  // namespace mixtrain
