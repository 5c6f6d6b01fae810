// Helpers shared by the optimizer tests: small parameter stores with known values, and a check
// that an error is thrown with a one-line message.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/nn/parameters.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain::testing_optim {

// "w" (3, 5) decayed, "b" (5) not decayed, "g" (7) decayed: sizes off the 16-element alignment,
// so the flat buffers have padding between parameters.
inline ParameterStore small_store(DType dtype = DType::f32, DType grad_dtype = DType::f32) {
  ParameterStore s;
  s.declare("w", {3, 5}, true);
  s.declare("b", {5}, false);
  s.declare("g", {7}, true);
  s.finalize(dtype, grad_dtype);
  return s;
}

// Several OpenMP pieces (> 16384 elements), sizes off every SIMD width and chunk length, both
// decay flags: the shape that exercises the fast kernels' splitting and tails.
inline ParameterStore big_store(DType dtype, DType grad_dtype) {
  ParameterStore s;
  s.declare("w", {67, 301}, true);
  s.declare("b", {301}, false);
  s.declare("u", {5001}, true);
  s.finalize(dtype, grad_dtype);
  return s;
}

// Writes values[i] (fp32, rounded to nearest for 16-bit tensors) into a flat f32/bf16/f16 tensor.
inline void set_flat(const Tensor& t, int64_t i, float value) {
  switch (t.dtype()) {
    case DType::f32:
      t.data<float>()[i] = value;
      break;
    case DType::bf16:
      t.data<bf16>()[i] = bf16_from_f32(value);
      break;
    case DType::f16:
      t.data<fp16>()[i] = fp16_from_f32(value);
      break;
    default:
      FAIL() << "set_flat: unsupported dtype";
  }
}
inline float get_flat(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>()[i];
    case DType::bf16:
      return f32_from_bf16(t.data<bf16>()[i]);
    case DType::f16:
      return f32_from_fp16(t.data<fp16>()[i]);
    default:
      ADD_FAILURE() << "get_flat: unsupported dtype";
      return 0.f;
  }
}
// The raw bytes of a tensor, for bit-for-bit comparisons (empty if undefined).
inline std::vector<unsigned char> raw_bytes(const Tensor& t) {
  if (!t.defined()) return {};
  const auto* b = static_cast<const unsigned char*>(t.raw_data());
  return std::vector<unsigned char>(b, b + t.nbytes());
}

// Deterministic, varied values (no RNG: easy to reproduce in a few lines of Python).
inline double param_value(int64_t i) { return 0.5 * std::sin(0.7 * double(i) + 0.3); }
inline double grad_value(int64_t i, int64_t step) {
  return 0.1 * std::cos(1.3 * double(i) + 0.9 * double(step)) + 0.01;
}

// Writes param_value(i) into every parameter element (padding stays zero).
// Any of f32 / bf16 / f16 (16-bit: the values rounded to nearest).
inline void fill_params(ParameterStore& s) {
  for (const ParamInfo& info : s.infos())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i)
      set_flat(s.flat_params(), i, float(param_value(i)));
}
inline void fill_grads(ParameterStore& s, int64_t step) {
  for (const ParamInfo& info : s.infos())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i)
      set_flat(s.flat_grads(), i, float(grad_value(i, step)));
}

// True if element i lies inside a parameter (not padding); and whether it decays.
inline const ParamInfo* owner(const ParameterStore& s, int64_t i) {
  for (const ParamInfo& info : s.infos())
    if (i >= info.offset && i < info.offset + info.numel) return &info;
  return nullptr;
}

// Runs f, expects exception E, returns its message (checked to be one line and non-empty).
template <class E, class F>
std::string expect_throw(F&& f) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_FALSE(msg.empty());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

}  // namespace mixtrain::testing_optim
