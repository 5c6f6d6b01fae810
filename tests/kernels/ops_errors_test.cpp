// Argument checking of the public forward ops: each bad input throws the right typed error, and
// the one-line message names the op and the offending shapes/values. Also backend lookup and the
// thread-count setting.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kernels/backend.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/threads.h"

namespace mixtrain {
namespace {

// Runs f, expects exception type E whose message contains every one of `parts`.
template <typename E>
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << *parts.begin();
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

Tensor f32(const Shape& s) { return Tensor::zeros(s, DType::f32); }

TEST(OpsErrors, Elementwise) {
  Tensor a = f32({2, 3}), out = f32({2, 3});
  expect_error<ShapeError>([&] { add(a, f32({4}), out); }, {"add", "b f32(4)", "a f32(2, 3)"});
  expect_error<ShapeError>([&] { mul(a, f32({3, 2}), out); }, {"mul", "(3, 2)", "(2, 3)"});
  expect_error<ShapeError>(
      [&] {
        Tensor o = f32({3, 2});
        add(a, a, o);
      },
      {"add", "out f32(3, 2)", "a f32(2, 3)"});
  expect_error<DTypeError>(
      [&] {
        add(Tensor::from_ints({1, 2, 3, 4, 5, 6}, {2, 3}), a, out);
      },
      {"add", "a i32(2, 3)"});
  expect_error<DTypeError>(
      [&] {
        Tensor o = Tensor::zeros({2, 3}, DType::i32);
        scale(a, 2.f, o);
      },
      {"scale", "out i32(2, 3)"});
  expect_error<ArgumentError>([&] { add(a, Tensor(), out); }, {"add", "b is undefined"});
  expect_error<ArgumentError>([&] { gelu(Tensor(), out); }, {"gelu", "x is undefined"});
  expect_error<ShapeError>(
      [&] {
        Tensor o = f32({6});
        gelu(a, o);
      },
      {"gelu", "out f32(6)", "x f32(2, 3)"});
  // A row broadcast is accepted; a row of the wrong length is not.
  EXPECT_NO_THROW(add(a, f32({3}), out));
  expect_error<ShapeError>([&] { add(a, f32({2}), out); }, {"add", "b f32(2)"});
}

TEST(OpsErrors, Reductions) {
  Tensor x = f32({4, 5});
  expect_error<DTypeError>(
      [&] {
        reduce(Tensor::from_ints({1, 2}, {2}), ReduceOp::sum);
      },
      {"reduce", "i32(2)"});
  expect_error<ArgumentError>([&] { reduce(Tensor(), ReduceOp::sum); }, {"reduce", "undefined"});
  expect_error<ArgumentError>([&] { reduce(f32({0, 3}), ReduceOp::max); }, {"reduce", "empty", "(0, 3)"});
  expect_error<ShapeError>(
      [&] {
        Tensor o = f32({5});
        reduce_last(x, ReduceOp::sum, o);
      },
      {"reduce_last", "out f32(5)", "x f32(4, 5)"});
  expect_error<DTypeError>(
      [&] {
        Tensor o = Tensor::zeros({4}, DType::f16);
        reduce_last(Tensor::zeros({4, 5}, DType::bf16), ReduceOp::sum, o);
      },
      {"reduce_last", "out f16(4)", "bf16(4, 5)"});
  expect_error<ShapeError>(
      [&] {
        Tensor o = f32({4});
        sum_to_row(x, o);
      },
      {"sum_to_row", "out f32(4)", "x f32(4, 5)"});
  expect_error<ShapeError>(
      [&] {
        Tensor s = f32({}), o = f32({});
        sum_to_row(s, o);
      },
      {"sum_to_row", "x f32()"});
}

TEST(OpsErrors, Softmax) {
  Tensor x = f32({3, 4});
  expect_error<ShapeError>(
      [&] {
        Tensor o = f32({4, 3});
        softmax_last(x, o);
      },
      {"softmax_last", "out f32(4, 3)", "x f32(3, 4)"});
  expect_error<DTypeError>(
      [&] {
        Tensor o = f32({3, 4});
        softmax_last(Tensor::zeros({3, 4}, DType::i32), o);
      },
      {"softmax_last", "x i32(3, 4)"});
  expect_error<ArgumentError>(
      [&] {
        Tensor undefined;
        softmax_last(x, undefined);
      },
      {"softmax_last", "out is undefined"});
}

TEST(OpsErrors, LayerNorm) {
  Tensor x = Tensor::zeros({4, 8}, DType::bf16), out = Tensor::zeros({4, 8}, DType::bf16);
  Tensor w = f32({8}), b = f32({8});
  expect_error<ShapeError>([&] { layer_norm(x, f32({7}), b, 1e-5f, out); },
                           {"layer_norm: weight f32(7) does not match x bf16(4, 8) last dim 8"});
  expect_error<ShapeError>(
      [&] {
        layer_norm(x, w, f32({8, 1}), 1e-5f, out);
      },
      {"layer_norm", "bias f32(8, 1)", "(4, 8)"});
  expect_error<ShapeError>(
      [&] {
        Tensor o = f32({8, 4});
        layer_norm(x, w, b, 1e-5f, o);
      },
      {"layer_norm", "out f32(8, 4)", "x bf16(4, 8)"});
  expect_error<ShapeError>(
      [&] {
        Tensor m = f32({5});
        layer_norm(x, w, b, 1e-5f, out, &m);
      },
      {"layer_norm", "mean f32(5)", "x bf16(4, 8)"});
  expect_error<DTypeError>(
      [&] {
        Tensor r = Tensor::zeros({4}, DType::bf16);
        layer_norm(x, w, b, 1e-5f, out, nullptr, &r);
      },
      {"layer_norm", "rstd bf16(4)"});
  expect_error<DTypeError>([&] { layer_norm(x, Tensor::zeros({8}, DType::i32), b, 1e-5f, out); },
                           {"layer_norm", "weight i32(8)"});
  expect_error<ArgumentError>([&] { layer_norm(x, w, Tensor(), 1e-5f, out); },
                              {"layer_norm", "bias is undefined"});
  expect_error<ArgumentError>([&] { layer_norm(x, w, b, -1.f, out); }, {"layer_norm", "eps", "(4, 8)"});
}

TEST(OpsErrors, Embedding) {
  Tensor w = f32({5, 3});
  Tensor out = f32({4, 3});
  expect_error<ArgumentError>(
      [&] {
        embedding(w, Tensor::from_ints({0, 1, 9, 2}, {4}), out);
      },
      {"embedding", "id 9", "position 2", "[0, 5)"});
  expect_error<ArgumentError>(
      [&] {
        embedding(w, Tensor::from_ints({0, -1, 1, 2}, {4}), out);
      },
      {"embedding", "id -1", "position 1"});
  expect_error<DTypeError>([&] { embedding(w, f32({4}), out); }, {"embedding", "ids f32(4)", "i32"});
  expect_error<DTypeError>(
      [&] {
        embedding(Tensor::zeros({5, 3}, DType::i32), Tensor::from_ints({0}, {1}), out);
      },
      {"embedding", "weight i32(5, 3)"});
  expect_error<ShapeError>(
      [&] {
        embedding(w, Tensor::from_ints({0, 1, 2}, {3}), out);
      },
      {"embedding", "out f32(4, 3)", "ids i32(3)", "weight f32(5, 3)"});
  expect_error<ShapeError>(
      [&] {
        embedding(f32({15}), Tensor::from_ints({0, 1, 2, 3}, {4}), out);
      },
      {"embedding", "weight f32(15)"});
  // (B, T) ids with a (B, T, C) output are accepted.
  Tensor o3 = f32({2, 2, 3});
  EXPECT_NO_THROW(embedding(w, Tensor::from_ints({0, 1, 2, 3}, {2, 2}), o3));
}

TEST(OpsErrors, CrossEntropy) {
  Tensor logits = f32({3, 5});
  expect_error<ArgumentError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({0, 7, 1}, {3}));
      },
      {"cross_entropy", "target 7", "row 1", "[0, 5)"});
  expect_error<ArgumentError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({0, 1, -2}, {3}));
      },
      {"cross_entropy", "target -2", "row 2"});
  expect_error<DTypeError>([&] { cross_entropy(logits, f32({3})); },
                           {"cross_entropy", "targets f32(3)", "i32"});
  expect_error<ShapeError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({0, 1}, {2}));
      },
      {"cross_entropy", "targets i32(2)", "logits f32(3, 5)"});
  expect_error<ShapeError>(
      [&] {
        Tensor l = f32({4});
        cross_entropy(logits, Tensor::from_ints({0, 1, 2}, {3}), &l);
      },
      {"cross_entropy", "losses f32(4)", "logits f32(3, 5)"});
  expect_error<DTypeError>(
      [&] {
        Tensor l = Tensor::zeros({3}, DType::bf16);
        cross_entropy(logits, Tensor::from_ints({0, 1, 2}, {3}), &l);
      },
      {"cross_entropy", "losses bf16(3)"});
  expect_error<DTypeError>(
      [&] {
        cross_entropy(Tensor::zeros({3, 5}, DType::i32), Tensor::from_ints({0, 1, 2}, {3}));
      },
      {"cross_entropy", "logits i32(3, 5)"});
  expect_error<ArgumentError>([&] { cross_entropy(Tensor(), Tensor::from_ints({0}, {1})); },
                              {"cross_entropy", "logits is undefined"});
  EXPECT_NO_THROW(cross_entropy(logits, Tensor::from_ints({0, -1, 4}, {3})));
}

TEST(OpsErrors, BackendAndThreads) {
  expect_error<ArgumentError>(
      [] {
        backend_for(Device{DeviceType::cuda, 0});
      },
      {"no backend for device cuda:0 in this build"});
  EXPECT_EQ(&backend_for(Device::cpu()), &backend_for(Device::cpu()));
  EXPECT_STREQ(backend_for(Device::cpu()).name, "cpu");
  EXPECT_STREQ(backend_for(Device::meta()).name, "meta");
  const int saved = num_threads();
  EXPECT_GE(saved, 1);
  expect_error<ArgumentError>([] { set_num_threads(0); }, {"set_num_threads", "0"});
  expect_error<ArgumentError>([] { set_num_threads(-3); }, {"set_num_threads", "-3"});
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(saved);
  EXPECT_EQ(num_threads(), saved);
}

}  // namespace
}  // namespace mixtrain
