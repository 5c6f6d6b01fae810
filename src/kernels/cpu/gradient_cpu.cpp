// The gradient kernels (kernels/gradient_kernels.h). The fused unscale + inf/NaN check + sum of
// squares: the scalar reference, an AVX-512 block kernel (per-function target attribute, reached
// only by run-time dispatch) and the OpenMP driver over fixed blocks. Both paths do the same fp32
// operations on the same lanes in the same order, so they agree bit for bit; the blocking is
// global_norm_f32's (below).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/gradient_kernels.h"
#include "kernels/optimizer_ops.h"
#include "mixtrain/core/cpu_features.h"

// GCC 12's masked AVX-512 intrinsics trip a false -Wmaybe-uninitialized (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// fp-contract=off: AVX-512F has FMA on zmm and GCC's intrinsics are plain vector operators, so it
// could fuse y*y + acc into one rounding; the reference (baseline x86-64, no FMA) rounds twice.
#define MIXTRAIN_TARGET_AVX512 __attribute__((target("avx512f"), optimize("fp-contract=off")))

namespace mixtrain {
namespace {

constexpr int64_t kBlock = 4096;        // the norm's blocks too (same sums, same bits)
constexpr int kLanes = cpu::kSumLanes;  // combined by cpu::combine_lanes (cpu_rows.h)

// One block (len <= kBlock), reference: element i goes to lane i % 16.
template <bool Write>
float block_ref(float* g, int64_t len, float inv_scale, bool& found_inf) {
  float acc[kLanes] = {};
  bool bad = false;
  for (int64_t i = 0; i < len; ++i) {
    float y = g[i];
    if constexpr (Write) {
      y = y * inv_scale;
      g[i] = y;
    }
    bad |= !std::isfinite(y);
    acc[i % kLanes] += y * y;
  }
  found_inf |= bad;
  return cpu::combine_lanes(acc);
}

// One block, AVX-512: lane j of the accumulator is lane j of the reference; the tail is a masked
// load / store (masked-off lanes add nothing).
template <bool Write>
MIXTRAIN_TARGET_AVX512 float block_avx512(float* g, int64_t len, float inv_scale, bool& found_inf) {
  const __m512 s = _mm512_set1_ps(inv_scale);
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);  // inf/NaN: exponent all ones
  __m512 acc = _mm512_setzero_ps();
  __mmask16 bad = 0;
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    __m512 y = _mm512_loadu_ps(g + i);
    if constexpr (Write) {
      y = _mm512_mul_ps(y, s);
      _mm512_storeu_ps(g + i, y);
    }
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(y), exp_mask), exp_mask);
    acc = _mm512_add_ps(acc, _mm512_mul_ps(y, y));
  }
  if (i < len) {
    const __mmask16 m = __mmask16((1u << (len - i)) - 1);
    __m512 y = _mm512_maskz_loadu_ps(m, g + i);
    if constexpr (Write) {
      y = _mm512_mul_ps(y, s);
      _mm512_mask_storeu_ps(g + i, m, y);
    }
    bad |= _mm512_mask_cmpeq_epi32_mask(m, _mm512_and_si512(_mm512_castps_si512(y), exp_mask), exp_mask);
    acc = _mm512_mask_add_ps(acc, m, acc, _mm512_mul_ps(y, y));
  }
  found_inf |= bad != 0;
  float lanes[kLanes];
  _mm512_storeu_ps(lanes, acc);
  return cpu::combine_lanes(lanes);
}

using BlockFn = float (*)(float*, int64_t, float, bool&);

BlockFn pick_block(bool avx512, bool write) {
  if (avx512) return write ? block_avx512<true> : block_avx512<false>;
  return write ? block_ref<true> : block_ref<false>;
}

}  // namespace

UnscaleResult unscale_and_check_ref(float* g, int64_t n, float inv_scale) {
  UnscaleResult r;
  const BlockFn block = pick_block(false, inv_scale != 1.f);  // torch skips the multiply by 1
  for (int64_t start = 0; start < n; start += kBlock)
    r.sum_squares += double(block(g + start, std::min(kBlock, n - start), inv_scale, r.found_inf));
  return r;
}

bool unscale_and_check_blocks(float* g, int64_t n, float inv_scale, double* partial) {
  if (n <= 0) return false;
  const BlockFn block = pick_block(!force_reference() && cpu_features().avx512f, inv_scale != 1.f);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  bool found_inf = false;
#pragma omp parallel for schedule(static) reduction(|| : found_inf) if (blocks > 4 && !force_reference())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * kBlock;
    bool bad = false;
    partial[b] = double(block(g + start, std::min(kBlock, n - start), inv_scale, bad));
    found_inf = found_inf || bad;
  }
  return found_inf;
}

double sum_block_sums(const double* partial, int64_t blocks) {
  double s = 0;
  for (int64_t b = 0; b < blocks; ++b) s += partial[b];  // block order: independent of the thread count
  return s;
}

UnscaleResult unscale_and_check(float* g, int64_t n, float inv_scale) {
  if (force_reference()) return unscale_and_check_ref(g, n, inv_scale);
  UnscaleResult r;
  if (n <= 0) return r;
  std::vector<double> partial(size_t((n + kBlock - 1) / kBlock), 0.0);
  r.found_inf = unscale_and_check_blocks(g, n, inv_scale, partial.data());
  r.sum_squares = sum_block_sums(partial.data(), int64_t(partial.size()));
  return r;
}

void sum_squares_blocks_16(const void* g, DType dtype, int64_t n, float* partial) {
  // cpu::reduce's blocks (reduce_cpu.cpp), one partial each.
  static_assert(cpu::kSumBlock == kGradNormBlock);
  const char* base = static_cast<const char*>(g);
  const size_t es = dtype_size(dtype);
  const int64_t blocks = (n + cpu::kSumBlock - 1) / cpu::kSumBlock;
  const int nt = cpu::threads_for(n);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * cpu::kSumBlock, len = std::min(cpu::kSumBlock, n - i0);
    float buf[cpu::kSumBlock];
    const float* p = cpu::load_row(base + i0 * static_cast<int64_t>(es), dtype, len, buf);
    partial[b] = cpu::sum_sq_dev_f32(p, len, 0.f);
  }
}

double combine_sum_squares_blocks_16(const float* partial, int64_t blocks) {
  return cpu::pairwise_sum(partial, blocks);
}

// The norm is the fused kernel's sum of squares with nothing to unscale: with inv_scale == 1 it
// only reads (Write = false), so the const_cast never writes, and the norm is bit-identical to
// sqrt(unscale_and_check(...).sum_squares) by construction (same blocks, lanes and order).
double global_norm_f32(const float* x, int64_t n) {
  return std::sqrt(unscale_and_check(const_cast<float*>(x), n, 1.f).sum_squares);
}

double global_norm_ref(const float* x, int64_t n) {
  return std::sqrt(unscale_and_check_ref(const_cast<float*>(x), n, 1.f).sum_squares);
}

UnscaleResult cpu::unscale_and_check(Tensor& g, float inv_scale) {
  return mixtrain::unscale_and_check(g.data<float>(), g.numel(), inv_scale);
}

double cpu::global_norm(const Tensor& g) { return global_norm_f32(g.data<float>(), g.numel()); }

UnscaleResult ref::unscale_and_check(Tensor& g, float inv_scale) {
  return unscale_and_check_ref(g.data<float>(), g.numel(), inv_scale);
}

double ref::global_norm(const Tensor& g) { return global_norm_ref(g.data<float>(), g.numel()); }

}  // namespace mixtrain
