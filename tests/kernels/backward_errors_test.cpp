// Argument checks of the public backward ops (kernels/ops_backward.h): every shape, dtype and value
// mistake throws the typed error (ShapeError, DTypeError, ArgumentError) with a one-line message
// naming the op and the offending tensors; nothing is written when a check fails.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>

#include "kernels/ops_backward.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

// Runs f, expects exception type E whose message is one line and contains every piece.
template <typename E>
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> pieces) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing " << *pieces.begin();
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

Tensor f32(const Shape& s) { return Tensor::zeros(s, DType::f32); }

TEST(BackwardErrors, GeluBackward) {
  Tensor x = f32({3, 4}), dx = f32({3, 4});
  expect_error<ShapeError>(
      [&] {
        gelu_backward(x, f32({3, 5}), dx);
      },
      {"gelu_backward", "dout f32(3, 5)", "x f32(3, 4)"});
  Tensor bad = f32({4, 3});
  expect_error<ShapeError>([&] { gelu_backward(x, x, bad); }, {"gelu_backward", "dx f32(4, 3)"});
  Tensor ints = Tensor::from_ints({1, 2, 3}, {3});
  expect_error<DTypeError>([&] { gelu_backward(ints, ints, dx); }, {"gelu_backward", "x i32(3)", "float"});
  Tensor undefined;
  expect_error<ArgumentError>([&] { gelu_backward(undefined, x, dx); }, {"gelu_backward", "x is undefined"});
}

TEST(BackwardErrors, CausalSoftmax) {
  Tensor x = f32({2, 3, 5}), y = f32({2, 3, 5});
  expect_error<ShapeError>([&] { causal_softmax(f32({5}), 1.f, y); },
                           {"causal_softmax", "x f32(5)", "2 dims"});
  Tensor wide = f32({2, 6, 5});
  expect_error<ShapeError>([&] { causal_softmax(wide, 1.f, wide); }, {"causal_softmax", "Tq = 6 > Tk = 5"});
  Tensor y2 = f32({2, 3, 4});
  expect_error<ShapeError>([&] { causal_softmax(x, 1.f, y2); },
                           {"causal_softmax", "y f32(2, 3, 4)", "x f32(2, 3, 5)"});
  expect_error<ArgumentError>([&] { causal_softmax(x, NAN, y); }, {"causal_softmax", "scale must be finite"});
  Tensor dx = f32({2, 3, 5});
  expect_error<ShapeError>(
      [&] {
        causal_softmax_backward(y, f32({2, 3, 6}), 1.f, dx);
      },
      {"causal_softmax_backward", "dy f32(2, 3, 6)", "y f32(2, 3, 5)"});
  expect_error<ShapeError>([&] { causal_softmax_backward(wide, wide, 1.f, wide); },
                           {"causal_softmax_backward", "Tq = 6 > Tk = 5"});
  expect_error<ArgumentError>([&] { causal_softmax_backward(y, y, INFINITY, dx); },
                              {"causal_softmax_backward", "scale"});
}

TEST(BackwardErrors, SoftmaxLastBackward) {
  Tensor y = f32({3, 4}), dx = f32({3, 4});
  expect_error<ShapeError>(
      [&] {
        softmax_last_backward(y, f32({4, 3}), dx);
      },
      {"softmax_last_backward", "dy f32(4, 3)", "y f32(3, 4)"});
  Tensor dx_bad = f32({3, 5});
  expect_error<ShapeError>([&] { softmax_last_backward(y, y, dx_bad); },
                           {"softmax_last_backward", "dx f32(3, 5)"});
}

TEST(BackwardErrors, LayerNormBackward) {
  Tensor x = f32({3, 8}), w = f32({8}), mean = f32({3}), rstd = f32({3}), dout = f32({3, 8}),
         dx = f32({3, 8});
  Tensor dw = f32({8}), db = f32({8});
  const char* op = "layer_norm_backward";
  Tensor w7 = f32({7});
  expect_error<ShapeError>([&] { layer_norm_backward(x, w7, mean, rstd, dout, dx, dw, db); },
                           {op, "weight f32(7)", "x f32(3, 8)"});
  expect_error<ShapeError>([&] { layer_norm_backward(x, w, mean, rstd, dout, dx, w7, db); },
                           {op, "dweight f32(7)"});
  expect_error<ShapeError>([&] { layer_norm_backward(x, w, mean, rstd, dout, dx, dw, w7); },
                           {op, "dbias f32(7)"});
  expect_error<ShapeError>([&] { layer_norm_backward(x, w, f32({4}), rstd, dout, dx, dw, db); },
                           {op, "mean f32(4)", "one element per row", "x f32(3, 8)"});
  expect_error<ShapeError>(
      [&] {
        layer_norm_backward(x, w, mean, rstd, f32({3, 7}), dx, dw, db);
      },
      {op, "dout f32(3, 7)"});
  Tensor dx_bad = f32({8, 3});
  expect_error<ShapeError>([&] { layer_norm_backward(x, w, mean, rstd, dout, dx_bad, dw, db); },
                           {op, "dx f32(8, 3)"});
  Tensor mean16 = Tensor::zeros({3}, DType::bf16);
  expect_error<DTypeError>([&] { layer_norm_backward(x, w, mean16, rstd, dout, dx, dw, db); },
                           {op, "mean bf16(3)", "f32"});
  // Nothing written when a check fails.
  dw.fill(5.0);
  EXPECT_THROW(layer_norm_backward(x, w, mean, f32({2}), dout, dx, dw, db), ShapeError);
  EXPECT_EQ(dw.at({0}), 5.0);
}

TEST(BackwardErrors, EmbeddingBackward) {
  const Tensor ids = Tensor::from_ints({0, 4, 1}, {3});
  Tensor dout = f32({3, 6}), dw = f32({5, 6});
  const char* op = "embedding_backward";
  expect_error<ShapeError>(
      [&] {
        embedding_backward(ids, f32({3, 7}), dw);
      },
      {op, "dout f32(3, 7)", "dweight f32(5, 6)"});
  expect_error<ShapeError>(
      [&] {
        embedding_backward(ids, f32({2, 6}), dw);
      },
      {op, "dout f32(2, 6)", "ids i32(3)"});
  Tensor dw1 = f32({30});
  expect_error<ShapeError>([&] { embedding_backward(ids, dout, dw1); }, {op, "dweight f32(30)", "(V, C)"});
  expect_error<DTypeError>([&] { embedding_backward(f32({3}), dout, dw); }, {op, "ids f32(3)", "i32"});
  dw.fill(1.0);
  const Tensor bad = Tensor::from_ints({0, 5, 1}, {3});
  expect_error<ArgumentError>([&] { embedding_backward(bad, dout, dw); },
                              {op, "id 5 at position 1", "[0, 5)"});
  const Tensor neg = Tensor::from_ints({-1, 0, 1}, {3});
  expect_error<ArgumentError>([&] { embedding_backward(neg, dout, dw); }, {op, "id -1 at position 0"});
  EXPECT_EQ(dw.at({0, 0}), 1.0);  // checked before anything is written
  // ids (2, 3) with dout (2, 3, C) or (6, C) are both accepted.
  const Tensor ids2 = Tensor::from_ints({0, 1, 2, 3, 4, 0}, {2, 3});
  EXPECT_NO_THROW(embedding_backward(ids2, f32({2, 3, 6}), dw));
  EXPECT_NO_THROW(embedding_backward(ids2, f32({6, 6}), dw));
}

TEST(BackwardErrors, CrossEntropyBackward) {
  Tensor logits = f32({4, 5}), dl = f32({4, 5});
  const Tensor t = Tensor::from_ints({0, -1, 4, 2}, {4});
  const char* op = "cross_entropy_backward";
  expect_error<ShapeError>(
      [&] {
        cross_entropy_backward(logits, Tensor::from_ints({0, 1, 2}, {3}), 1.f, dl);
      },
      {op, "targets i32(3)", "logits f32(4, 5)"});
  Tensor dl_bad = f32({4, 6});
  expect_error<ShapeError>([&] { cross_entropy_backward(logits, t, 1.f, dl_bad); },
                           {op, "dlogits f32(4, 6)"});
  Tensor dl8 = Tensor::zeros({4, 5}, DType::f8_e4m3);
  expect_error<DTypeError>([&] { cross_entropy_backward(logits, t, 1.f, dl8); },
                           {op, "dlogits f8_e4m3(4, 5)"});
  Tensor dl64 = Tensor::zeros({4, 5}, DType::f64);
  expect_error<DTypeError>([&] { cross_entropy_backward(logits, t, 1.f, dl64); }, {op, "dlogits f64(4, 5)"});
  expect_error<DTypeError>([&] { cross_entropy_backward(logits, f32({4}), 1.f, dl); },
                           {op, "targets f32(4)", "i32"});
  expect_error<ArgumentError>(
      [&] {
        cross_entropy_backward(logits, Tensor::from_ints({0, 5, 0, 0}, {4}), 1.f, dl);
      },
      {op, "target 5 at position 1", "[0, 5)"});
  expect_error<ArgumentError>([&] { cross_entropy_backward(logits, t, NAN, dl); },
                              {op, "dloss must be finite"});
}

TEST(BackwardErrors, Accumulators) {
  Tensor out = f32({4});
  expect_error<ShapeError>(
      [&] {
        sum_to_row_accumulate(f32({3, 5}), out);
      },
      {"sum_to_row_accumulate", "out f32(4)", "x f32(3, 5)"});
  Tensor out2 = f32({2, 4});
  expect_error<ShapeError>(
      [&] {
        sum_to_row_accumulate(f32({3, 4}), out2);
      },
      {"sum_to_row_accumulate", "out f32(2, 4)"});
  Tensor acc = f32({3, 4});
  expect_error<ShapeError>([&] { add_inplace(acc, f32({4})); }, {"add_inplace", "x f32(4)", "acc f32(3, 4)"});
  Tensor iacc = Tensor::from_ints({1, 2}, {2});
  expect_error<DTypeError>([&] { add_inplace(iacc, f32({2})); }, {"add_inplace", "acc i32(2)"});
}

}  // namespace
}  // namespace mixtrain
