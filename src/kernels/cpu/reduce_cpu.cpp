// Fast CPU reductions (cpu::reduce, reduce_last, sum_to_row) and the blocked fp32 sums
// every other fast kernel uses (cpu_rows.h). Sums are lane-parallel inside fixed 4096-element
// blocks and pairwise across blocks, so they vectorise, stay accurate for 10^7+ elements, and do
// not depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/simd_forms.h"
#include "kernels/cpu/softmax_avx512.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {
constexpr int kLanes = kSumLanes;

// One block (n <= kSumBlock): 16 independent lanes (no reassociation needed to vectorise), each
// summing 16-element runs into a sub-total that is then added to the lane's total, so no fp32
// accumulator takes more than ~16 additions before its value moves up a level.
constexpr int64_t kSub = kSumSub;
MIXTRAIN_SIMD_CLONES float block_sum_sq_dev(const float* p, int64_t n, float mu, bool square) {
  float total[kLanes] = {}, sub[kLanes];
  const int64_t n16 = n - n % kLanes;
  for (int64_t s0 = 0; s0 < n16; s0 += kSub) {
    const int64_t s1 = std::min(n16, s0 + kSub);
    for (int j = 0; j < kLanes; ++j) sub[j] = 0.f;
    if (square) {
      for (int64_t i = s0; i < s1; i += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          const float d = p[i + j] - mu;
          sub[j] += d * d;
        }
    } else {
      for (int64_t i = s0; i < s1; i += kLanes)
        for (int j = 0; j < kLanes; ++j) sub[j] += p[i + j];
    }
    for (int j = 0; j < kLanes; ++j) total[j] += sub[j];
  }
  for (int64_t i = n16; i < n; ++i) {
    const float d = square ? (p[i] - mu) * (p[i] - mu) : p[i];
    total[i - n16] += d;
  }
  return combine_lanes(total);
}

// A lane that meets a NaN keeps it (v > NaN and NaN != NaN... are false), so NaN propagates.
MIXTRAIN_SIMD_CLONES float block_max(const float* p, int64_t n) {
  float m[kLanes];
  for (int j = 0; j < kLanes; ++j) m[j] = -std::numeric_limits<float>::infinity();
  const int64_t n16 = n - n % kLanes;
  for (int64_t i = 0; i < n16; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) {
      const float v = p[i + j], cur = m[j];
      m[j] = ((v > cur) | (v != v)) ? v : cur;
    }
  }
  for (int64_t i = n16; i < n; ++i) {
    const float v = p[i];
    m[0] = ((v > m[0]) | (v != v)) ? v : m[0];
  }
  float best = m[0];
  for (int j = 0; j < kLanes; ++j) {
    if (m[j] != m[j]) return m[j];
    best = m[j] > best ? m[j] : best;
  }
  return best;
}

MIXTRAIN_SIMD_CLONES void exp_sub(const float* x, float m, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = exp_f32(x[i] - m);
}

// Blocked pairwise over blocks: split the block count in half (left gets the floor).
float sum_sq_dev_rec(const float* p, int64_t n, float mu, bool square) {
  if (n <= kSumBlock) return block_sum_sq_dev(p, n, mu, square);
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  const int64_t half = (blocks / 2) * kSumBlock;
  return sum_sq_dev_rec(p, half, mu, square) + sum_sq_dev_rec(p + half, n - half, mu, square);
}
}  // namespace

float sum_f32(const float* p, int64_t n) { return sum_sq_dev_rec(p, n, 0.f, false); }
float sum_sq_dev_f32(const float* p, int64_t n, float mu) { return sum_sq_dev_rec(p, n, mu, true); }

float pairwise_sum(const float* partials, int64_t n) {
  if (n == 0) return 0.f;
  if (n == 1) return partials[0];
  const int64_t left = n / 2;
  return pairwise_sum(partials, left) + pairwise_sum(partials + left, n - left);
}

float max_f32(const float* p, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; i += kSumBlock) {
    const int64_t len = std::min(kSumBlock, n - i);
    const float m = avx512_forms_run() ? block_max_avx512(p + i, len) : block_max(p + i, len);
    if (m != m) return m;
    best = m > best ? m : best;
  }
  return best;
}

namespace {
// exp_sub and the sum of its results in one pass over a row of at most kSumBlock: the lanes,
// sub-totals and tail of block_sum_sq_dev exactly, so the sum is sum_f32(out) bit for bit (the
// softmax rows were read twice, and the two calls cost as much as the exponentials).
MIXTRAIN_SIMD_CLONES float exp_sub_block_sum(const float* x, float m, float* out, int64_t n) {
  float total[kLanes] = {}, sub[kLanes];
  const int64_t n16 = n - n % kLanes;
  for (int64_t s0 = 0; s0 < n16; s0 += kSub) {
    const int64_t s1 = std::min(n16, s0 + kSub);
    for (int j = 0; j < kLanes; ++j) sub[j] = 0.f;
    for (int64_t i = s0; i < s1; i += kLanes)
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) {
        const float e = exp_f32(x[i + j] - m);
        out[i + j] = e;
        sub[j] += e;
      }
    for (int j = 0; j < kLanes; ++j) total[j] += sub[j];
  }
  for (int64_t i = n16; i < n; ++i) {
    out[i] = exp_f32(x[i] - m);
    total[i - n16] += out[i];
  }
  return combine_lanes(total);
}
}  // namespace

float exp_sub_sum_f32(const float* x, float m, float* out, int64_t n) {
  const bool avx512 = avx512_forms_run();  // the same values and sums, fewer instructions
  if (n <= kSumBlock)
    return avx512 ? exp_sub_block_sum_avx512(x, m, out, n) : exp_sub_block_sum(x, m, out, n);
  avx512 ? exp_sub_avx512(x, m, out, n) : exp_sub(x, m, out, n);
  return sum_f32(out, n);
}

namespace {
// One reduction over n values as a fp32 result (mean divides the sum by n).
float finish(ReduceOp op, float acc, int64_t n) {
  return op == ReduceOp::mean ? acc / static_cast<float>(n) : acc;
}

// Reduces one contiguous fp32 row.
float reduce_row(const float* p, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return max_f32(p, n);
    case ReduceOp::sum_squares:
      return sum_sq_dev_f32(p, n, 0.f);
    case ReduceOp::sum:
    case ReduceOp::mean:
      return finish(op, sum_f32(p, n), n);
  }
  return 0.f;
}
// run[j] += x[r][j] for n rows of w columns, rows in order: one call per run of rows, the bf16
// widening inline (a conversion call per row cost more than the sums).
MIXTRAIN_SIMD_CLONES void add_run_f32(const float* p, int64_t stride, int64_t n, int64_t w, float* run) {
  for (int64_t r = 0; r < n; ++r) {
    const float* row = p + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) run[j] += row[j];
  }
}
MIXTRAIN_SIMD_CLONES void add_run_bf16(const bf16* p, int64_t stride, int64_t n, int64_t w, float* run) {
  for (int64_t r = 0; r < n; ++r) {
    const bf16* row = p + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) run[j] += f32_from_bf16(row[j]);
  }
}
}  // namespace
}  // namespace cpu

double cpu::reduce(const Tensor& x_in, ReduceOp op) {
  if (force_reference() || !cpu::fast_dtype(x_in.dtype())) return ref::reduce(x_in, op);
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  const char* base = static_cast<const char*>(x.raw_data());
  const size_t es = dtype_size(x.dtype());
  // One partial per fixed block, so the result is the same for any thread count.
  const int64_t blocks = (n + cpu::kSumBlock - 1) / cpu::kSumBlock;
  std::vector<float> part(static_cast<size_t>(blocks));
  const int nt = cpu::threads_for(n);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * cpu::kSumBlock, len = std::min(cpu::kSumBlock, n - i0);
    float buf[cpu::kSumBlock];
    const float* p = cpu::load_row(base + i0 * static_cast<int64_t>(es), x.dtype(), len, buf);
    part[static_cast<size_t>(b)] = op == ReduceOp::max           ? cpu::max_f32(p, len)
                                   : op == ReduceOp::sum_squares ? cpu::sum_sq_dev_f32(p, len, 0.f)
                                                                 : cpu::sum_f32(p, len);
  }
  if (op == ReduceOp::max) return cpu::max_f32(part.data(), blocks);
  return cpu::finish(op, cpu::pairwise_sum(part.data(), blocks), n);
}

void cpu::reduce_last(const Tensor& x, ReduceOp op, Tensor& out) {
  cpu::RowView xv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype()) ||
      !cpu::as_rows(x, xv))
    return ref::reduce_last(x, op, out);
  const int64_t R = xv.rows, C = xv.cols;
  Tensor o = out.is_contiguous() ? out : Tensor::empty(out.shape(), out.dtype(), MemCategory::workspace);
  float* res = cpu::out_row(o.raw_data(), o.dtype(), cpu::scratch(1, R));
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const float* p = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
    res[r] = cpu::reduce_row(p, C, op);
  }
  cpu::store_row(res, o.raw_data(), o.dtype(), R);
  if (o.raw_data() != out.raw_data()) out.copy_from(o);
}

void cpu::argmax_last(const Tensor& x, Tensor& out) {
  cpu::RowView xv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::as_rows(x, xv))
    return ref::argmax_last(x, out);
  const int64_t R = xv.rows, C = xv.cols;
  auto* o = static_cast<int32_t*>(out.raw_data());
  const bool dense = out.is_contiguous();
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const float* p = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
    int64_t best = 0;
    float m = p[0];
    for (int64_t c = 1; c < C && !std::isnan(m); ++c)
      if (std::isnan(p[c]) || p[c] > m) {
        m = p[c];
        best = c;
      }
    o[dense ? r : ref::detail::elem_offset(out, r)] = static_cast<int32_t>(best);
  }
}

void cpu::sum_to_row(const Tensor& x, Tensor& out) {
  cpu::RowView xv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype()) ||
      !cpu::as_rows(x, xv))
    return ref::sum_to_row(x, out);
  // Rows in three levels of 16 (runs of 16 rows -> blocks of 256 -> groups of 4096), then the
  // group partial rows added pairwise: no fp32 accumulator takes more than 16 additions per level.
  // A work item is one block, walked row by row over the full width (sequential reads); the
  // blocks of a group are then added in order. All splits are fixed, so threads only change who
  // computes what.
  constexpr int64_t kRun = 16, kBlockRows = 16 * kRun, kBlocksPerGroup = 16;
  const int64_t R = xv.rows, C = xv.cols;
  const int64_t blocks = std::max<int64_t>(1, (R + kBlockRows - 1) / kBlockRows);
  const int64_t groups = (blocks + kBlocksPerGroup - 1) / kBlocksPerGroup;
  std::vector<float> block_sums(static_cast<size_t>(blocks * C));
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t b0 = blk * kBlockRows, b_end = std::min(R, b0 + kBlockRows);
    float* block = &block_sums[static_cast<size_t>(blk * C)];
    float* run = cpu::scratch(0, C);
    float* buf = cpu::scratch(1, C);
    for (int64_t j = 0; j < C; ++j) block[j] = 0.f;
    for (int64_t r0 = b0; r0 < b_end; r0 += kRun) {
      for (int64_t j = 0; j < C; ++j) run[j] = 0.f;
      const int64_t n = std::min(b_end, r0 + kRun) - r0;
      if (xv.dtype == DType::f32) {
        cpu::add_run_f32(static_cast<const float*>(xv.row(r0)), xv.row_stride, n, C, run);
      } else if (xv.dtype == DType::bf16) {
        cpu::add_run_bf16(static_cast<const bf16*>(xv.row(r0)), xv.row_stride, n, C, run);
      } else {
        for (int64_t r = r0; r < r0 + n; ++r) {
          const float* p = cpu::load_row(xv.row(r), xv.dtype, C, buf);
          for (int64_t j = 0; j < C; ++j) run[j] += p[j];
        }
      }
      for (int64_t j = 0; j < C; ++j) block[j] += run[j];
    }
  }
  std::vector<float> partial(static_cast<size_t>(groups * C), 0.f);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* total = &partial[static_cast<size_t>((blk / kBlocksPerGroup) * C)];
    const float* block = &block_sums[static_cast<size_t>(blk * C)];
    for (int64_t j = 0; j < C; ++j) total[j] += block[j];
  }
  // Pairwise over groups, a fixed tree: partial[g] += partial[g + step].
  for (int64_t step = 1; step < groups; step *= 2)
    for (int64_t g = 0; g + step < groups; g += 2 * step) {
      float* dst = &partial[static_cast<size_t>(g * C)];
      const float* src = &partial[static_cast<size_t>((g + step) * C)];
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  // out is (C), possibly strided.
  if (out.stride(0) == 1 || C <= 1) {
    cpu::store_row(partial.data(), out.raw_data(), out.dtype(), C);
  } else {
    for (int64_t c = 0; c < C; ++c)
      store_from_f32(out.raw_data(), out.dtype(), c * out.stride(0), partial[static_cast<size_t>(c)]);
  }
}

}  // namespace mixtrain
