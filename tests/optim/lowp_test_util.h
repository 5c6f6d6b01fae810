// Helpers for the 16-bit (*-true) optimizer tests: run an optimizer on a store under a given
// reference/fast switch and thread count and snapshot every buffer's bits; check a 16-bit result
// against a value computed in double.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"
#include "optim/optim_test_util.h"

namespace mixtrain::testing_optim {

// Sets force_reference and the OpenMP thread count for one scope.
struct RunMode {
  RunMode(bool reference, int threads) : saved_ref(force_reference()), saved_threads(omp_get_max_threads()) {
    set_force_reference(reference);
    omp_set_num_threads(threads);
  }
  ~RunMode() {
    set_force_reference(saved_ref);
    omp_set_num_threads(saved_threads);
  }
  bool saved_ref;
  int saved_threads;
};

// Every buffer an optimizer step writes, as bytes.
struct Snapshot {
  std::vector<unsigned char> p, s0, s1, c;
  bool operator==(const Snapshot&) const = default;
};

// The value of a 16-bit pattern and its position on the number line (adjacent values differ by 1;
// +0 and -0 are both 0).
inline double lowp_value(DType t, uint16_t b) {
  return t == DType::bf16 ? f32_from_bf16(bf16::from_bits(b)) : f32_from_fp16(fp16::from_bits(b));
}
inline int lowp_ord(uint16_t b) { return (b & 0x8000) ? -int(b & 0x7fff) : int(b & 0x7fff); }
inline uint16_t lowp_nearest_bits(DType t, double d) {
  return t == DType::bf16 ? bf16_from_f32(float(d)).bits() : fp16_from_f32(float(d)).bits();
}
inline uint16_t lowp_bits(const Tensor& t, int64_t i) {
  return t.dtype() == DType::bf16 ? t.data<bf16>()[i].bits() : t.data<fp16>()[i].bits();
}

// `got` must be d rounded to nearest, where d (exact, in double) may be off the value the fp32
// kernel computed by up to `slack`: equal to rn(d), or -- only when d lies within slack of the
// midpoint between two 16-bit values -- its neighbour on the other side.
inline ::testing::AssertionResult is_nearest(DType t, uint16_t got, double d, double slack) {
  const uint16_t e = lowp_nearest_bits(t, d);
  if (got == e || (lowp_value(t, got) == 0 && lowp_value(t, e) == 0)) return ::testing::AssertionSuccess();
  const double dg = std::abs(lowp_value(t, got) - d), de = std::abs(lowp_value(t, e) - d);
  if (std::abs(lowp_ord(got) - lowp_ord(e)) == 1 && std::abs(dg - de) <= 2 * slack)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << lowp_value(t, got) << " (0x" << std::hex << got << std::dec
         << "), expected round-to-nearest of " << d << " = " << lowp_value(t, e);
}

// `got` must be one of the two 16-bit values bracketing d (either neighbour of rn(d) when d is
// within slack of rn(d), since the fp32 value may be on the other side).
inline ::testing::AssertionResult brackets(DType t, uint16_t got, double d, double slack) {
  const uint16_t e = lowp_nearest_bits(t, d);
  const double ev = lowp_value(t, e), gv = lowp_value(t, got);
  if (got == e) return ::testing::AssertionSuccess();
  const bool adjacent = std::abs(lowp_ord(got) - lowp_ord(e)) == 1;
  const bool right_side = (gv - ev) * (d - ev) > 0 || std::abs(d - ev) <= slack;
  if (adjacent && right_side) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << gv << ", not a 16-bit neighbour of " << d;
}

}  // namespace mixtrain::testing_optim
