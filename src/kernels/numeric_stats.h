// The numerics probes' statistics of one tensor: how its values would fare in each low-precision
// format (mixtrain numerics, README "Numerics diagnostics"). One pass over the values counts, for
// fp16, bf16, fp8 E4M3 and E5M2, how many round (nearest even, as numeric/*.h converts) to a
// subnormal, to zero (flushed: a non-zero value lost), or past the largest finite value
// (overflow); plus exact zeros, inf/NaN and the largest finite |x|. And the optimizer update's
// count of values smaller than half an ulp of their weight (lost to nearest rounding).
//
// Every bound below is a threshold on |x|'s fp32 bit pattern (for non-negative floats integer
// order is float order), so the fast path is integer compares the compiler vectorises; the
// reference converts every value with numeric/*.h and classifies the result (the oracle).
#pragma once
#include <array>
#include <cstdint>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

enum class ProbeFormat : uint8_t { fp16, bf16, e4m3, e5m2 };
constexpr size_t kNumProbeFormats = 4;
const char* probe_format_name(ProbeFormat f);  // "fp16", "bf16", "e4m3", "e5m2"

struct FormatCounts {
  int64_t subnormal = 0;  // rounds to a subnormal of the format
  int64_t flushed = 0;    // non-zero, rounds to zero
  int64_t overflow = 0;   // finite, rounds past the largest finite (inf, or NaN in E4M3)
};

struct NumericStats {
  int64_t numel = 0;
  int64_t zeros = 0;      // exactly +-0
  int64_t nonfinite = 0;  // inf or NaN already
  float amax = 0;         // largest finite |x| (0 when none)
  std::array<FormatCounts, kNumProbeFormats> formats{};
  const FormatCounts& in(ProbeFormat f) const { return formats[static_cast<size_t>(f)]; }
  // Adds another tensor's counts (one site seen several times in a step).
  void merge(const NumericStats& o);
};

// The reference: each value converted by numeric/*.h and the result classified. x: (n)
NumericStats numeric_stats_ref(const float* x, int64_t n);
// The fast path: bit-pattern thresholds, vectorised, OpenMP over fixed blocks (the counts do not
// depend on the thread count). The reference when force_reference() is on. x: (n)
NumericStats numeric_stats_f32(const float* x, int64_t n);
// Any float tensor (any layout; 16-bit and fp8 values are widened to fp32 first, exactly).
NumericStats numeric_stats(const Tensor& t);

// Adds x's values to a histogram of their fp32 exponent fields: bin 0 holds zeros and fp32
// subnormals, bin b in 1..254 the values with 2^(b-127) <= |x| < 2^(b-126), bin 255 inf/NaN.
// (The loss-scale advice reads the share of gradients below a power of two from it.) x: (n)
using Log2Histogram = std::array<int64_t, 256>;
void add_log2_histogram(const float* x, int64_t n, Log2Histogram& hist);

// Of n updates u (applied to weights w before the update), how many satisfy
// |u| < ulp(w in `storage`) / 2, i.e. w + u rounds back to w in that format: the update is lost
// to nearest rounding. The ulp of a zero or subnormal w is the format's smallest subnormal.
// storage: f32, bf16 or f16. u, w: (n)
int64_t count_below_half_ulp_ref(const float* u, const float* w, int64_t n, DType storage);
int64_t count_below_half_ulp(const float* u, const float* w, int64_t n, DType storage);

// An optimizer update u = after - before (fp32): its statistics and how many of its values are
// below half an ulp of `before` in `storage`, in bf16 and in fp16 (count_below_half_ulp).
// before, after: (n)
struct UpdateStats {
  NumericStats stats;
  int64_t below_half_ulp[3] = {0, 0, 0};  // storage, bf16, fp16
};
UpdateStats update_stats(const float* before, const float* after, int64_t n, DType storage);

}  // namespace mixtrain
