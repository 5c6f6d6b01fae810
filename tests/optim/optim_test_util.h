// Helpers shared by the optimizer tests: small parameter stores with known values, and a check
// that an error is thrown with a one-line message.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/nn/parameters.h"

namespace mixtrain::testing_optim {

// "w" (3, 5) decayed, "b" (5) not decayed, "g" (7) decayed: sizes off the 16-element alignment,
// so the flat buffers have padding between parameters.
inline ParameterStore small_store(DType dtype = DType::f32) {
  ParameterStore s;
  s.declare("w", {3, 5}, true);
  s.declare("b", {5}, false);
  s.declare("g", {7}, true);
  s.finalize(dtype, DType::f32);
  return s;
}

// Deterministic, varied values (no RNG: easy to reproduce in a few lines of Python).
inline double param_value(int64_t i) { return 0.5 * std::sin(0.7 * double(i) + 0.3); }
inline double grad_value(int64_t i, int64_t step) { return 0.1 * std::cos(1.3 * double(i) + 0.9 * double(step)) + 0.01; }

// Writes param_value(i) into every parameter element (padding stays zero).
inline void fill_params(ParameterStore& s) {
  float* p = s.flat_params().data<float>();
  for (const ParamInfo& info : s.infos())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i) p[i] = float(param_value(i));
}
inline void fill_grads(ParameterStore& s, int64_t step) {
  float* g = s.flat_grads().data<float>();
  for (const ParamInfo& info : s.infos())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i) g[i] = float(grad_value(i, step));
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
