// The fast numerics statistics (kernels/numeric_stats.h): one pass of integer compares on |x|'s
// fp32 bits against per-format thresholds, in fixed 4096-element blocks (OpenMP over blocks,
// 32-bit counters inside a block, vectorised), checked against the reference in
// tests/kernels/numeric_stats_test.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/numeric_stats.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain {
namespace {

constexpr uint32_t kInfBits = 0x7f800000u;
constexpr uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Round-to-nearest-even boundaries of a format on |x| (bit patterns of non-negative fp32):
//   |x| <= flush_max                    -> rounds to 0 (the tie at half the smallest subnormal
//                                          goes to 0, whose mantissa is even)
//   flush_max < |x| < normal_min         -> rounds to a subnormal (the tie below the smallest
//                                          normal goes up to it: even mantissa)
//   overflow_min <= |x| < inf           -> rounds past the largest finite M (the tie at
//                                          M + ulp(M)/2 goes up when M's mantissa is odd)
struct Bounds {
  uint32_t flush_max, normal_min, overflow_min;
};
// min_sub: smallest subnormal; min_normal; max: largest finite; max_odd: M's mantissa is odd.
constexpr Bounds bounds(float min_sub, float min_normal, float max, float half_ulp_max, bool max_odd) {
  return {bits(min_sub / 2), bits(min_normal - min_sub / 2), bits(max + half_ulp_max) + (max_odd ? 0u : 1u)};
}
constexpr Bounds kBounds[kNumProbeFormats] = {
    bounds(0x1p-24f, 0x1p-14f, 65504.f, 16.f, true),            // fp16 1/5/10
    bounds(0x1p-133f, 0x1p-126f, 0x1.fep127f, 0x1p119f, true),  // bf16 1/8/7
    bounds(0x1p-9f, 0x1p-6f, 448.f, 16.f, false),               // E4M3: 448 = 1.110b x 2^8
    bounds(0x1p-16f, 0x1p-14f, 57344.f, 4096.f, true),          // E5M2: 57344 = 1.11b x 2^15
};
static_assert(kBounds[0].overflow_min == 0x477ff000u);  // 65520
static_assert(kBounds[2].overflow_min == 0x43e80001u);  // just above 464

constexpr int64_t kBlock = 4096;

// Counts of one block, in 32-bit lanes (a block has fewer than 2^32 elements).
struct BlockCounts {
  uint32_t zeros = 0, nonfinite = 0, amax = 0;
  uint32_t sub[kNumProbeFormats] = {}, flush[kNumProbeFormats] = {}, over[kNumProbeFormats] = {};
};

// One format's three counts over |x|'s bits; each test is one unsigned compare (the subtraction
// wraps values below the range's start to large numbers), so the loop vectorises.
template <int F>
[[gnu::always_inline]] inline void format_counts(const uint32_t* a, int64_t n, BlockCounts& c) {
  constexpr Bounds b = kBounds[F];
  uint32_t flush = 0, sub = 0, over = 0;
  for (int64_t i = 0; i < n; ++i) {
    flush += (a[i] - 1u) < b.flush_max;                                    // 0 < a <= flush_max
    sub += (a[i] - b.flush_max - 1u) < (b.normal_min - b.flush_max - 1u);  // flush_max < a < normal_min
    over += (a[i] - b.overflow_min) < (kInfBits - b.overflow_min);         // overflow_min <= a < inf
  }
  c.flush[F] = flush, c.sub[F] = sub, c.over[F] = over;
}

MIXTRAIN_SIMD_CLONES
void block_counts(const float* x, int64_t n, BlockCounts& c) {
  uint32_t a[kBlock];  // |x| as bits
  uint32_t zeros = 0, nonfinite = 0, amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t v = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    a[i] = v;
    zeros += v == 0;
    nonfinite += v >= kInfBits;
    const uint32_t fv = v < kInfBits ? v : 0u;
    amax = fv > amax ? fv : amax;
  }
  c.zeros = zeros, c.nonfinite = nonfinite, c.amax = amax;
  format_counts<0>(a, n, c);
  format_counts<1>(a, n, c);
  format_counts<2>(a, n, c);
  format_counts<3>(a, n, c);
}

// half an ulp of w as stored in `storage`, as the reference defines it, from the exponent bits
// of the rounded weight (f32 and bf16 here; f16 rounds through fp16_from_f32).
struct UlpFormat {
  int mantissa_bits, min_exponent;
};
inline double half_ulp(float w, DType storage, UlpFormat fmt) {
  uint32_t b = std::bit_cast<uint32_t>(w) & 0x7fffffffu;
  if (storage == DType::bf16 && b < kInfBits) b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;  // RNE
  if (storage == DType::f16) b = std::bit_cast<uint32_t>(std::fabs(f32_from_fp16(fp16_from_f32(w))));
  if (b >= kInfBits) return INFINITY;
  const int e = std::max(static_cast<int>(b >> 23) - 127, fmt.min_exponent);
  return std::bit_cast<double>(static_cast<uint64_t>(e - fmt.mantissa_bits - 1 + 1023) << 52);  // 2^(e-m-1)
}

}  // namespace

const char* probe_format_name(ProbeFormat f) {
  static const char* const names[] = {"fp16", "bf16", "e4m3", "e5m2"};
  return names[static_cast<size_t>(f)];
}

void NumericStats::merge(const NumericStats& o) {
  numel += o.numel, zeros += o.zeros, nonfinite += o.nonfinite;
  amax = std::max(amax, o.amax);
  for (size_t f = 0; f < kNumProbeFormats; ++f) {
    formats[f].subnormal += o.formats[f].subnormal;
    formats[f].flushed += o.formats[f].flushed;
    formats[f].overflow += o.formats[f].overflow;
  }
}

namespace {
// The blocks of n values at x in dtype t (f32, bf16 or f16, contiguous); 16-bit blocks are widened
// into a per-thread fp32 buffer first (exact).
NumericStats stats_blocks(const void* x, DType t, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<BlockCounts> per(static_cast<size_t>(blocks));
  const size_t width = dtype_size(t);
  const int nt = cpu::threads_for(n);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t w = std::min(kBlock, n - k * kBlock);
    const void* src = static_cast<const char*>(x) + static_cast<size_t>(k * kBlock) * width;
    block_counts(cpu::load_row(src, t, w, cpu::scratch(0, kBlock)), w, per[static_cast<size_t>(k)]);
  }
  NumericStats s;
  s.numel = n;
  uint32_t amax = 0;
  for (const BlockCounts& c : per) {
    s.zeros += c.zeros, s.nonfinite += c.nonfinite;
    amax = std::max(amax, c.amax);
    for (size_t f = 0; f < kNumProbeFormats; ++f) {
      s.formats[f].subnormal += c.sub[f];
      s.formats[f].flushed += c.flush[f];
      s.formats[f].overflow += c.over[f];
    }
  }
  s.amax = std::bit_cast<float>(amax);
  return s;
}
}  // namespace

NumericStats numeric_stats_f32(const float* x, int64_t n) {
  if (force_reference()) return numeric_stats_ref(x, n);
  return stats_blocks(x, DType::f32, n);
}

NumericStats numeric_stats(const Tensor& t) {
  if (t.is_meta() || t.numel() == 0) return NumericStats{};
  if (t.is_contiguous() && cpu::fast_dtype(t.dtype()) && !force_reference())
    return stats_blocks(t.raw_data(), t.dtype(), t.numel());
  const Tensor f = t.to(DType::f32, MemCategory::workspace).contiguous();  // strided, fp8, f64
  return numeric_stats_f32(f.data<float>(), f.numel());
}

void add_log2_histogram(const float* x, int64_t n, Log2Histogram& hist) {
  for (int64_t i = 0; i < n; ++i) ++hist[(std::bit_cast<uint32_t>(x[i]) >> 23) & 0xffu];
}

int64_t count_below_half_ulp(const float* u, const float* w, int64_t n, DType storage) {
  if (force_reference() || (storage != DType::f32 && storage != DType::bf16 && storage != DType::f16))
    return count_below_half_ulp_ref(u, w, n, storage);
  const UlpFormat fmt = storage == DType::f16    ? UlpFormat{10, -14}
                        : storage == DType::bf16 ? UlpFormat{7, -126}
                                                 : UlpFormat{23, -126};
  const int nt = cpu::threads_for(n);
  int64_t lost = 0;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : lost) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) lost += std::fabs(static_cast<double>(u[i])) < half_ulp(w[i], storage, fmt);
  return lost;
}

UpdateStats update_stats(const float* before, const float* after, int64_t n, DType storage) {
  std::vector<float> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) u[static_cast<size_t>(i)] = after[i] - before[i];
  UpdateStats r;
  r.stats = numeric_stats_f32(u.data(), n);
  r.below_half_ulp[0] = count_below_half_ulp(u.data(), before, n, storage);
  r.below_half_ulp[1] = count_below_half_ulp(u.data(), before, n, DType::bf16);
  r.below_half_ulp[2] = count_below_half_ulp(u.data(), before, n, DType::f16);
  return r;
}

}  // namespace mixtrain
