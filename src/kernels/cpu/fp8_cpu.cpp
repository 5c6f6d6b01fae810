// Fast CPU kernel of the fp8 recipes' quantization (kernels/fp8.h): the block amaxes in one pass
// over the rows (threads take contiguous row ranges, each with its own grid of partial maxima,
// merged with max, which is exact and free of order), the scales from the grid (kernels/
// fp8_formula.h, the reference's rule), then the cast in a second pass over the rows, branch free
// so it vectorises (fp8q::cast_value_fast, held to the reference's cast on every bf16 input by
// tests/kernels/ops/fp8_test.cpp). Layouts without a row view go to the reference.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/fp8_formula.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain {
namespace cpu {
namespace {

// |x|, with NaN counted as +inf (a block holding either is not finite).
inline float abs_or_inf(float v) {
  const float a = std::fabs(v);
  return a != a ? INFINITY : a;
}

// g[c] = max(g[c], |x[c]|): the column blocks of one column each.
MIXTRAIN_SIMD_CLONES void max_into(const float* x, float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = abs_or_inf(x[i]);
    g[i] = a > g[i] ? a : g[i];
  }
}

// g[j] = max(g[j], max |x| over the j-th run of bc columns), for a whole row in one call (the
// MXFP8 and 1 x 128 blocks are short: a call per block cost more than its work).
MIXTRAIN_SIMD_CLONES void row_block_maxes(const float* x, int64_t C, int64_t bc, float* g) {
  for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
    const int64_t n = std::min(bc, C - c0);
    float m = 0.f;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; ++i) {
      const float a = abs_or_inf(x[c0 + i]);
      m = a > m ? a : m;
    }
    g[j] = m > g[j] ? m : g[j];
  }
}

// The cast loops, one per format: a template inlined into non-template clones (clang's
// target_clones takes no function template).
template <DType F>
__attribute__((always_inline)) inline void cast_loop(const float* x, float s, float sinv, bool dequantize,
                                                     float* o, int64_t n) {
  if (dequantize) {
    for (int64_t i = 0; i < n; ++i) o[i] = fp8q::cast_value_fast(x[i] * s, F) * sinv;
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = fp8q::cast_value_fast(x[i] * s, F);
  }
}
MIXTRAIN_SIMD_CLONES void cast_span_e4m3(const float* x, float s, float sinv, bool dequantize, float* o,
                                         int64_t n) {
  cast_loop<DType::f8_e4m3>(x, s, sinv, dequantize, o, n);
}
MIXTRAIN_SIMD_CLONES void cast_span_e5m2(const float* x, float s, float sinv, bool dequantize, float* o,
                                         int64_t n) {
  cast_loop<DType::f8_e5m2>(x, s, sinv, dequantize, o, n);
}

// Narrow blocks (a few columns each, e.g. one: the transposed rowwise, MXFP8 and 1 x 128 uses):
// each column with its block's scale, spread over the row, so the loop runs over all C at once.
// A block that is not finite has NaN scales: x * NaN is the quiet NaN, as the wide loop's fill.
template <DType F>
__attribute__((always_inline)) inline void cast_loop_scaled(const float* x, const float* s, const float* sinv,
                                                            bool dequantize, float* o, int64_t n) {
  if (dequantize) {
    for (int64_t i = 0; i < n; ++i) o[i] = fp8q::cast_value_fast(x[i] * s[i], F) * sinv[i];
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = fp8q::cast_value_fast(x[i] * s[i], F);
  }
}
MIXTRAIN_SIMD_CLONES void cast_span_scaled_e4m3(const float* x, const float* s, const float* sinv,
                                                bool dequantize, float* o, int64_t n) {
  cast_loop_scaled<DType::f8_e4m3>(x, s, sinv, dequantize, o, n);
}
MIXTRAIN_SIMD_CLONES void cast_span_scaled_e5m2(const float* x, const float* s, const float* sinv,
                                                bool dequantize, float* o, int64_t n) {
  cast_loop_scaled<DType::f8_e5m2>(x, s, sinv, dequantize, o, n);
}

// One output row (fp32, in o) into q's row: bf16/f32/f16 as values, the fp8 formats as codes (the
// values are exact in the format: nothing is rounded again).
void store_q_row(const float* o, void* dst, DType t, int64_t n) {
  if (t == DType::f8_e4m3)
    convert_f32_to_fp8_e4m3(o, static_cast<fp8_e4m3*>(dst), static_cast<size_t>(n));
  else if (t == DType::f8_e5m2)
    convert_f32_to_fp8_e5m2(o, static_cast<fp8_e5m2*>(dst), static_cast<size_t>(n));
  else
    store_row(o, dst, t, n);
}

}  // namespace
}  // namespace cpu

void cpu::fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q,
                       Tensor& scale_inv, Tensor& amax) {
  cpu::RowView xv, qv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || x.dim() != 2 || !cpu::as_rows(x, xv) ||
      !cpu::as_rows(q, qv))
    return ref::fp8_quantize(x, how, scale, q, scale_inv, amax);
  const int64_t R = x.size(0), C = x.size(1);
  if (R == 0 || C == 0) return;
  const Fp8Blocks bl = fp8_blocks(how, R, C);
  const int64_t br = bl.rows, bc = bl.cols, nbc = bl.grid_cols, grid = bl.grid_rows * nbc;
  const float* given = scale ? scale->data<float>() : nullptr;

  float* am = amax.data<float>();
  float* si = scale_inv.data<float>();
  const int nt = cpu::threads_for(R * C);
  const auto cast_row = [&](const float* row, const float* s, const float* sinv, float* o) {
    if (how.format == DType::f8_e4m3)
      cpu::cast_span_scaled_e4m3(row, s, sinv, how.dequantize, o, C);
    else
      cpu::cast_span_scaled_e5m2(row, s, sinv, how.dequantize, o, C);
  };
  // One pass where a block is a run within one row (rowwise, MXFP8, 1 x 128): each row's amaxes,
  // scales and casts while the row is at hand.
  if (br == 1) {
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; ++r) {
      const float* row = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
      float* o = qv.dtype == DType::f32 ? static_cast<float*>(qv.row(r)) : cpu::scratch(1, C);
      float* s_row = cpu::scratch(2, C);
      float* si_row = cpu::scratch(3, C);
      float* ar = am + r * nbc;
      std::fill(ar, ar + nbc, 0.f);
      cpu::row_block_maxes(row, C, bc, ar);
      for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
        const int64_t b = r * nbc + j, n = std::min(bc, C - c0);
        const fp8q::Scale s = fp8q::block_scale(am[b], how, given ? given + b : nullptr);
        si[b] = s.scale_inv;
        std::fill(s_row + c0, s_row + c0 + n, s.scale);
        std::fill(si_row + c0, si_row + c0 + n, s.scale_inv);
      }
      cast_row(row, s_row, si_row, o);
      if (qv.dtype != DType::f32) cpu::store_q_row(o, qv.row(r), qv.dtype, C);
    }
    return;
  }

  // Pass 1: the block amaxes. Thread t takes rows [t R / nt, (t + 1) R / nt) into its own grid.
  // Grow-only buffers kept between calls: fresh ones of an MXFP8 grid's size (a float per 32
  // elements) are new pages every call, and the kernel spent more time clearing them than casting.
  thread_local std::vector<float> part_buf, sc_buf;
  if (part_buf.size() < size_t(nt * grid)) part_buf.resize(size_t(nt * grid));
  if (sc_buf.size() < size_t(grid)) sc_buf.resize(size_t(grid));
  float* part = part_buf.data();
  std::fill(part, part + nt * grid, 0.f);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = nt > 1 ? omp_get_thread_num() : 0;
    float* g = part + t * grid;
    float* buf = cpu::scratch(0, C);
    for (int64_t r = R * t / nt; r < R * (t + 1) / nt; ++r) {
      const float* row = cpu::load_row(xv.row(r), xv.dtype, C, buf);
      float* gr = g + (r / br) * nbc;
      if (bc == 1)
        cpu::max_into(row, gr, C);
      else
        cpu::row_block_maxes(row, C, bc, gr);
    }
  }
  float* sc = sc_buf.data();
  for (int64_t b = 0; b < grid; ++b) {
    float m = part[b];
    for (int t = 1; t < nt; ++t) m = std::max(m, part[t * grid + b]);
    am[b] = m;
    const fp8q::Scale s = fp8q::block_scale(m, how, given ? given + b : nullptr);
    sc[b] = s.scale;
    si[b] = s.scale_inv;
  }

  // Pass 2: the cast, rows split over threads.
  const bool narrow = bc <= 128;  // MXFP8's 32, the block recipe's 128, and single columns
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t spread_gi = -1;  // the block row whose scales s_row / si_row hold
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const float* row = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
      float* o = qv.dtype == DType::f32 ? static_cast<float*>(qv.row(r)) : cpu::scratch(1, C);
      const int64_t gi = (r / br) * nbc;
      if (narrow) {
        // The block row's scales spread over the columns (again only when the block row changes).
        float* s_row = cpu::scratch(2, C);
        float* si_row = cpu::scratch(3, C);
        if (spread_gi != gi) {
          for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
            const int64_t b = gi + j, n = std::min(bc, C - c0);
            std::fill(s_row + c0, s_row + c0 + n, sc[b]);  // NaN for a block that is not finite
            std::fill(si_row + c0, si_row + c0 + n, si[b]);
          }
          spread_gi = gi;
        }
        cast_row(row, s_row, si_row, o);
        if (qv.dtype != DType::f32) cpu::store_q_row(o, qv.row(r), qv.dtype, C);
        continue;
      }
      for (int64_t j = 0; j < nbc; ++j) {
        const int64_t c0 = j * bc, n = std::min(bc, C - c0);
        const float s = sc[gi + j], sinv = si[gi + j];
        if (!std::isfinite(am[gi + j])) {
          std::fill(o + c0, o + c0 + n, NAN);
        } else if (how.format == DType::f8_e4m3) {
          cpu::cast_span_e4m3(row + c0, s, sinv, how.dequantize, o + c0, n);
        } else {
          cpu::cast_span_e5m2(row + c0, s, sinv, how.dequantize, o + c0, n);
        }
      }
      if (qv.dtype != DType::f32) cpu::store_q_row(o, qv.row(r), qv.dtype, C);
    }
  }
}

// The stats row by row (rows split over threads, each row's sums kept, added in row order
// afterwards: the reference's order, whatever the thread count); q's rows staged in fp32.
void cpu::fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                          Fp8ErrorStats& s) {
  cpu::RowView xv, qv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || x.dim() != 2 || !cpu::as_rows(x, xv) ||
      !cpu::as_rows(q, qv))
    return ref::fp8_quant_error(x, how, q, scale_inv, s);
  const int64_t R = x.size(0), C = x.size(1);
  if (R == 0 || C == 0) return;
  const Fp8Blocks bl = fp8_blocks(how, R, C);
  const int64_t br = bl.rows, bc = bl.cols, nbc = bl.grid_cols;
  const float* si = scale_inv.data<float>();
  std::vector<Fp8ErrorStats> rows(static_cast<size_t>(R));
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
    float* qr = cpu::scratch(1, C);
    convert_any(qv.row(r), qv.dtype, qr, DType::f32, static_cast<size_t>(C));
    Fp8ErrorStats& row = rows[size_t(r)];
    const float* sr = si + (r / br) * nbc;
    for (int64_t c = 0; c < C; ++c) fp8q::error_element(xr[c], qr[c], sr[c / bc], how, row);
  }
  for (const Fp8ErrorStats& row : rows) s.add(row);
}

}  // namespace mixtrain
