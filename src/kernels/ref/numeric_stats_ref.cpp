// The reference numerics statistics (kernels/numeric_stats.h): every value converted by the
// format's own conversion (numeric/*.h, round to nearest even) and the result classified.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/numeric_stats.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"
#include "mixtrain/numeric/fp8.h"

namespace mixtrain {
namespace {

enum class Kind { normal, subnormal, zero, overflow };

// The class of x converted to format f. The exponent field is 0 for zero and subnormals and all
// ones for inf/NaN (fp16, bf16, E5M2); E4M3 has no inf and one NaN pattern, S.1111.111.
Kind classify(float x, ProbeFormat f) {
  uint32_t mag = 0, exp_field = 0, exp_ones = 0;
  switch (f) {
    case ProbeFormat::fp16:
      mag = fp16_from_f32(x).bits() & 0x7fffu;
      exp_field = mag >> 10, exp_ones = 0x1f;
      break;
    case ProbeFormat::bf16:
      mag = bf16_from_f32(x).bits() & 0x7fffu;
      exp_field = mag >> 7, exp_ones = 0xff;
      break;
    case ProbeFormat::e4m3:
      mag = fp8_e4m3_from_f32(x).bits() & 0x7fu;
      if (mag == 0x7f) return Kind::overflow;  // the NaN pattern
      exp_field = mag >> 3, exp_ones = 0x100;  // never all ones: 0x78..0x7e are normal
      break;
    case ProbeFormat::e5m2:
      mag = fp8_e5m2_from_f32(x).bits() & 0x7fu;
      exp_field = mag >> 2, exp_ones = 0x1f;
      break;
  }
  if (mag == 0) return Kind::zero;
  if (exp_field == exp_ones) return Kind::overflow;
  return exp_field == 0 ? Kind::subnormal : Kind::normal;
}

struct Format {
  int mantissa_bits;
  int min_exponent;  // of the smallest normal
};
Format format_of(DType d) {
  switch (d) {
    case DType::f16:
      return {10, -14};
    case DType::bf16:
      return {7, -126};
    case DType::f32:
      return {23, -126};
    default:
      throw DTypeError("count_below_half_ulp: storage must be f32, bf16 or f16, got " +
                       std::string(dtype_name(d)));
  }
}
float round_to(float w, DType d) {
  if (d == DType::f16) return f32_from_fp16(fp16_from_f32(w));
  if (d == DType::bf16) return f32_from_bf16(bf16_from_f32(w));
  return w;
}

}  // namespace

NumericStats numeric_stats_ref(const float* x, int64_t n) {
  NumericStats s;
  s.numel = n;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      ++s.nonfinite;
      continue;
    }
    if (v == 0) {
      ++s.zeros;
      continue;
    }
    s.amax = std::max(s.amax, std::fabs(v));
    for (size_t f = 0; f < kNumProbeFormats; ++f) {
      switch (classify(v, static_cast<ProbeFormat>(f))) {
        case Kind::subnormal:
          ++s.formats[f].subnormal;
          break;
        case Kind::zero:
          ++s.formats[f].flushed;
          break;
        case Kind::overflow:
          ++s.formats[f].overflow;
          break;
        case Kind::normal:
          break;
      }
    }
  }
  return s;
}

int64_t count_below_half_ulp_ref(const float* u, const float* w, int64_t n, DType storage) {
  const Format fmt = format_of(storage);
  int64_t lost = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float wd = round_to(w[i], storage);  // the weight as stored
    // ulp(wd) = 2^(e - mantissa_bits) with 2^e <= |wd| < 2^(e+1); e never below the smallest
    // normal's exponent (zero and subnormals share the subnormal spacing).
    int e = fmt.min_exponent;
    if (std::isfinite(wd) && wd != 0) e = std::max(std::ilogb(wd), fmt.min_exponent);
    // in double: half of fp32's smallest subnormal is not an fp32 value
    const double half_ulp = std::isfinite(wd) ? std::ldexp(1.0, e - fmt.mantissa_bits - 1) : INFINITY;
    if (std::fabs(static_cast<double>(u[i])) < half_ulp) ++lost;
  }
  return lost;
}

}  // namespace mixtrain
