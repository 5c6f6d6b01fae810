// Fast CPU kernel of the fp8 recipes' quantization (kernels/fp8.h): the block amaxes in one pass
// over the rows (threads take contiguous row ranges, each with its own grid of partial maxima,
// merged with max, which is exact and free of order), the scales from the grid (kernels/
// fp8_formula.h, the reference's rule), then the cast in a second pass over the rows; where a
// block is a run within one row (rowwise, MXFP8, 1 x 128) both in one pass, row by row. The passes
// are made of two row primitives (fp8_rows.h): here as loops the compiler vectorises, branch free
// (fp8q::cast_value_fast, held to the reference's cast on every bf16 input by
// tests/kernels/ops/fp8_test.cpp), and in fp8_avx512.cpp with AVX-512 intrinsics, used where the
// CPU has them. x and q are read and written in place when bf16 or f32; f16 x and fp8-code q are
// staged in fp32. Layouts without a row view go to the reference.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/fp8_rows.h"
#include "kernels/cpu/simd_forms.h"
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

// The element's load and store: bf16 widened by its bits, f32 as is; a value stored to bf16
// rounded to nearest even (bf16_from_f32, what store_row does).
__attribute__((always_inline)) inline float load_value(float v) { return v; }
__attribute__((always_inline)) inline float load_value(bf16 v) { return f32_from_bf16(v); }
__attribute__((always_inline)) inline void store_value(float v, float& o) { o = v; }
__attribute__((always_inline)) inline void store_value(float v, bf16& o) { o = bf16_from_f32(v); }

// ---- the portable row primitives (fp8_rows.h): plain loops, vectorised by the compiler --------

// g[c] = max(g[c], |x[c]|): the column blocks of one column each.
template <typename In>
__attribute__((always_inline)) inline void max_into_loop(const In* x, float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = abs_or_inf(load_value(x[i]));
    g[i] = a > g[i] ? a : g[i];
  }
}
// g[j] = max(g[j], max |x| over the j-th run of bc columns), for a whole row in one call (the
// MXFP8 and 1 x 128 blocks are short: a call per block cost more than its work).
template <typename In>
__attribute__((always_inline)) inline void row_block_maxes_loop(const In* x, int64_t C, int64_t bc,
                                                                float* g) {
  for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
    const int64_t n = std::min(bc, C - c0);
    float m = 0.f;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; ++i) {
      const float a = abs_or_inf(load_value(x[c0 + i]));
      m = a > m ? a : m;
    }
    g[j] = m > g[j] ? m : g[j];
  }
}
// Plain always_inline templates called from the clones, no lambdas: a lambda is a function of the
// default target, and one not inlined into a clone ran its loop unvectorised.
template <typename In>
__attribute__((always_inline)) inline void block_maxes_of(const In* x, int64_t C, int64_t bc, float* g) {
  if (bc == 1)
    max_into_loop(x, g, C);
  else
    row_block_maxes_loop(x, C, bc, g);
}
MIXTRAIN_SIMD_CLONES void block_maxes_in(const void* x, DType xt, int64_t C, int64_t bc, float* g) {
  if (xt == DType::bf16)
    block_maxes_of(static_cast<const bf16*>(x), C, bc, g);
  else
    block_maxes_of(static_cast<const float*>(x), C, bc, g);
}
// Short blocks of a bf16 row take the row widened first: GCC's reduction of a 32-element block
// read as bf16 took twice the time of the widening and the fp32 reduction together.
void block_maxes_portable(const void* x, DType xt, int64_t C, int64_t bc, float* g) {
  if (xt == DType::bf16 && bc > 1) {
    float* w = scratch(0, C);  // slot 0: the caller stages only f16 rows there, never bf16 ones
    widen_bf16_row(static_cast<const bf16*>(x), w, C);
    return block_maxes_in(w, DType::f32, C, bc, g);
  }
  block_maxes_in(x, xt, C, bc, g);
}

// The cast of n elements, one scale for them all (S float) or one each (S const float*): load,
// scale, cast, scale back, store in one loop, so a row is read once and written once. A NaN scale
// (a block that is not finite) gives the quiet NaN, as the reference's.
__attribute__((always_inline)) inline float at(float v, int64_t) { return v; }
__attribute__((always_inline)) inline float at(const float* v, int64_t i) { return v[i]; }
template <DType F, typename In, typename Out, typename S>
__attribute__((always_inline)) inline void cast_loop(const In* x, S s, S sinv, bool dequantize, Out* o,
                                                     int64_t n) {
  if (dequantize) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = fp8q::cast_value_fast(load_value(x[i]) * at(s, i), F) * at(sinv, i);
      store_value(at(s, i) != at(s, i) ? NAN : v, o[i]);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = fp8q::cast_value_fast(load_value(x[i]) * at(s, i), F);
      store_value(at(s, i) != at(s, i) ? NAN : v, o[i]);
    }
  }
}
template <DType F, typename In, typename S>
__attribute__((always_inline)) inline void cast_to(const In* x, S s, S sinv, bool dequantize, void* o,
                                                   DType ot, int64_t n) {
  if (ot == DType::bf16)
    cast_loop<F>(x, s, sinv, dequantize, static_cast<bf16*>(o), n);
  else
    cast_loop<F>(x, s, sinv, dequantize, static_cast<float*>(o), n);
}
template <DType F, typename S>
__attribute__((always_inline)) inline void cast_from(const void* x, DType xt, S s, S sinv, bool dequantize,
                                                     void* o, DType ot, int64_t n) {
  if (xt == DType::bf16)
    cast_to<F>(static_cast<const bf16*>(x), s, sinv, dequantize, o, ot, n);
  else
    cast_to<F>(static_cast<const float*>(x), s, sinv, dequantize, o, ot, n);
}
template <typename S>
__attribute__((always_inline)) inline void cast_any(const void* x, DType xt, S s, S sinv, bool dequantize,
                                                    void* o, DType ot, DType format, int64_t n) {
  if (format == DType::f8_e4m3)
    cast_from<DType::f8_e4m3>(x, xt, s, sinv, dequantize, o, ot, n);
  else
    cast_from<DType::f8_e5m2>(x, xt, s, sinv, dequantize, o, ot, n);
}
MIXTRAIN_SIMD_CLONES void cast_span(const void* x, DType xt, float s, float sinv, bool dequantize, void* o,
                                    DType ot, DType format, int64_t n) {
  cast_any(x, xt, s, sinv, dequantize, o, ot, format, n);
}
MIXTRAIN_SIMD_CLONES void cast_span_each(const void* x, DType xt, const float* s, const float* sinv,
                                         bool dequantize, void* o, DType ot, DType format, int64_t n) {
  cast_any(x, xt, s, sinv, dequantize, o, ot, format, n);
}

// Blocks of bc: one call per block where blocks are wide; narrow ones (MXFP8's 32, the block
// recipe's 128) have their scales spread over the row first, so that one loop runs over all C
// (a call per short block cost more than its work).
void cast_blocks_portable(const void* x, DType xt, const float* s, const float* sinv, int64_t bc,
                          bool dequantize, bool /*pow2_scales*/, void* o, DType ot, DType format, int64_t C) {
  if (bc == 1) return cast_span_each(x, xt, s, sinv, dequantize, o, ot, format, C);
  if (bc <= 128) {
    float* s_row = scratch(2, C);
    float* si_row = scratch(3, C);
    for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
      const int64_t n = std::min(bc, C - c0);
      std::fill(s_row + c0, s_row + c0 + n, s[j]);
      std::fill(si_row + c0, si_row + c0 + n, sinv[j]);
    }
    return cast_span_each(x, xt, s_row, si_row, dequantize, o, ot, format, C);
  }
  const size_t xs = dtype_size(xt), os = dtype_size(ot);
  for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc)
    cast_span(static_cast<const char*>(x) + size_t(c0) * xs, xt, s[j], sinv[j], dequantize,
              static_cast<char*>(o) + size_t(c0) * os, ot, format, std::min(bc, C - c0));
}

// One output row (fp32, in o) into q's row: the fp8 formats as codes (the values are exact in the
// format: nothing is rounded again).
void store_codes_row(const float* o, void* dst, DType t, int64_t n) {
  if (t == DType::f8_e4m3)
    convert_f32_to_fp8_e4m3(o, static_cast<fp8_e4m3*>(dst), static_cast<size_t>(n));
  else
    convert_f32_to_fp8_e5m2(o, static_cast<fp8_e5m2*>(dst), static_cast<size_t>(n));
}

}  // namespace

// The primitives the kernel uses: AVX-512 where the CPU has it, else the loops above.
const Fp8RowKernels& fp8_rows() {
  static const Fp8RowKernels* avx512 = fp8_rows_avx512();
  return avx512 && !portable_forms_only() ? *avx512 : fp8_rows_portable();
}

const Fp8RowKernels& fp8_rows_portable() {
  static const Fp8RowKernels k{block_maxes_portable, cast_blocks_portable, /*block_scales_preferred=*/false};
  return k;
}

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
  const cpu::Fp8RowKernels& k = cpu::fp8_rows();
  // The e8m0 and pow2 rules' scales are powers of two, unless a given one (delayed scaling) is not.
  const bool pow2 = how.rule != Fp8ScaleRule::fp32 && given == nullptr;

  float* am = amax.data<float>();
  float* si = scale_inv.data<float>();
  const int nt = cpu::threads_for(R * C);
  // x's row where the primitives read it (f32 and bf16 in place; f16 widened into scratch slot
  // 0) and q's row where they write it (f32 and bf16 in place; fp8 codes staged in fp32 in slot 1).
  const bool x_in_place = x.dtype() != DType::f16;
  const bool q_in_place = qv.dtype == DType::f32 || qv.dtype == DType::bf16;
  const DType xt = x_in_place ? xv.dtype : DType::f32, ot = q_in_place ? qv.dtype : DType::f32;
  const auto x_row = [&](int64_t r) -> const void* {
    return x_in_place ? xv.row(r) : cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
  };
  const auto q_row = [&](int64_t r) -> void* { return q_in_place ? qv.row(r) : cpu::scratch(1, C); };
  const auto finish_q_row = [&](void* o, int64_t r) {
    if (!q_in_place) cpu::store_codes_row(static_cast<const float*>(o), qv.row(r), qv.dtype, C);
  };

  // One pass where a block is a run within one row (rowwise, MXFP8, 1 x 128): each row's amaxes,
  // scales and casts while the row is at hand.
  if (br == 1) {
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; ++r) {
      const void* row = x_row(r);
      float* ar = am + r * nbc;
      thread_local std::vector<float> sr_buf;  // the row's scales (the scratch slots are taken)
      if (sr_buf.size() < size_t(nbc)) sr_buf.resize(size_t(nbc));
      float* sr = sr_buf.data();
      std::fill(ar, ar + nbc, 0.f);
      k.block_maxes(row, xt, C, bc, ar);
      for (int64_t j = 0; j < nbc; ++j) {
        const fp8q::Scale s = fp8q::block_scale(ar[j], how, given ? given + r * nbc + j : nullptr);
        sr[j] = s.scale;
        si[r * nbc + j] = s.scale_inv;
      }
      void* o = q_row(r);
      k.cast_blocks(row, xt, sr, si + r * nbc, bc, how.dequantize, pow2, o, ot, how.format, C);
      finish_q_row(o, r);
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
    for (int64_t r = R * t / nt; r < R * (t + 1) / nt; ++r)
      k.block_maxes(x_row(r), xt, C, bc, g + (r / br) * nbc);
  }
  float* sc = sc_buf.data();
  for (int64_t b = 0; b < grid; ++b) {
    float m = part[b];
    for (int t = 1; t < nt; ++t) m = std::max(m, part[t * grid + b]);
    am[b] = m;
    const fp8q::Scale s = fp8q::block_scale(m, how, given ? given + b : nullptr);
    sc[b] = s.scale;  // NaN for a block that is not finite
    si[b] = s.scale_inv;
  }

  // Pass 2: the cast, rows split over threads; each row's scales are its block row's of the grid.
  // For the portable loops, short blocks spanning several rows (the block recipe's 128 x 128 weight
  // tiles) have their scales spread over the columns once per block row, and the rows cast with a
  // scale per column (bc 1): spreading them again for every row cost more than the cast.
  const bool spread = bc > 1 && bc <= 128 && !k.block_scales_preferred;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t spread_gi = -1;  // the block row whose scales s_col / si_col hold
    thread_local std::vector<float> s_col, si_col;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t gi = (r / br) * nbc;
      const float *s = sc + gi, *sinv = si + gi;
      int64_t cols = bc;
      if (spread) {
        if (spread_gi != gi) {
          s_col.resize(size_t(C));
          si_col.resize(size_t(C));
          for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
            const int64_t n = std::min(bc, C - c0);
            std::fill(s_col.begin() + c0, s_col.begin() + c0 + n, s[j]);
            std::fill(si_col.begin() + c0, si_col.begin() + c0 + n, sinv[j]);
          }
          spread_gi = gi;
        }
        s = s_col.data();
        sinv = si_col.data();
        cols = 1;
      }
      void* o = q_row(r);
      k.cast_blocks(x_row(r), xt, s, sinv, cols, how.dequantize, pow2, o, ot, how.format, C);
      finish_q_row(o, r);
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
