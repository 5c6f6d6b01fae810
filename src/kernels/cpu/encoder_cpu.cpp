// Fast CPU encoder kernels (cpu::activation, activation_backward, masked_softmax): rows
// staged to fp32, fp32 loops, each result rounded once; f64, fp8 and layouts without a row view
// go to the scalar references (ref/encoder_ref.cpp). Every element depends only on its own row,
// so results are identical for any thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/gelu_avx512.h"
#include "kernels/cpu/simd_forms.h"
#include "kernels/cpu/softmax_avx512.h"
#include "kernels/ops_backward.h"

namespace mixtrain {
namespace cpu {
namespace {

// GELU (exact, erf form, the formula of the reference and of torch) with the vectorisable erf_f32
// and exp_f32 (cpu_rows.h, within ~1.5 ulp of the C library's); tanh from the C library (only
// the pooler uses it, on one row per sequence).
MIXTRAIN_SIMD_CLONES void gelu_erf_f32(const float* x, float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * x[i] * (1.f + erf_f32(x[i] * 0.70710678118654752f));
}

MIXTRAIN_SIMD_CLONES void gelu_erf_grad_f32(const float* x, const float* g, float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.f + erf_f32(x[i] * 0.70710678118654752f));
    o[i] = g[i] * (cdf + x[i] * 0.39894228040143268f * exp_f32(-0.5f * x[i] * x[i]));
  }
}

void act_f32(Activation k, const float* x, float* o, int64_t n) {
  switch (k) {
    case Activation::gelu_erf:
      return gelu_erf_f32(x, o, n);
    case Activation::tanh:
      for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(x[i]);
      return;
    case Activation::relu:
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] > 0.f ? x[i] : (x[i] != x[i] ? x[i] : 0.f);
      return;
  }
}

void act_grad_f32(Activation k, const float* x, const float* g, float* o, int64_t n) {
  switch (k) {
    case Activation::gelu_erf:
      return gelu_erf_grad_f32(x, g, o, n);
    case Activation::tanh:
      for (int64_t i = 0; i < n; ++i) {
        const float t = std::tanh(x[i]);
        o[i] = g[i] * (1.f - t * t);
      }
      return;
    case Activation::relu:
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] > 0.f ? g[i] : 0.f;
      return;
  }
}

}  // namespace

// s[j] = scale * p[j] where m[j] != 0, else -inf; returns the largest s (NaN when one is NaN, as
// max_f32), in 16 lanes. Compiled for AVX-512 like the other row loops: in masked_softmax's own
// body (built for the baseline ISA) this loop was scalar and a third of the kernel.
MIXTRAIN_SIMD_CLONES float masked_scale_max(const float* p, const int32_t* m, float scale, float* s,
                                            int64_t n) {
  constexpr int kLanes = 16;
  float mx[kLanes];
  for (int j = 0; j < kLanes; ++j) mx[j] = -INFINITY;
  const int64_t n16 = n - n % kLanes;
  for (int64_t i = 0; i < n16; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) {
      // the select in integer bits: GCC leaves the float select on an int mask scalar
      const uint32_t keep = m[i + j] != 0 ? ~0u : 0u;
      const float v = std::bit_cast<float>((std::bit_cast<uint32_t>(scale * p[i + j]) & keep) |
                                           (std::bit_cast<uint32_t>(-INFINITY) & ~keep)),
                  cur = mx[j];
      s[i + j] = v;
      mx[j] = ((v > cur) | (v != v)) ? v : cur;
    }
  }
  for (int64_t i = n16; i < n; ++i) {
    const float v = m[i] != 0 ? scale * p[i] : -INFINITY;
    s[i] = v;
    mx[0] = ((v > mx[0]) | (v != v)) ? v : mx[0];
  }
  float best = mx[0];
  for (int j = 1; j < kLanes; ++j) best = ((mx[j] > best) | (mx[j] != mx[j])) ? mx[j] : best;
  return best;
}

}  // namespace cpu

void cpu::activation(Activation kind, const Tensor& x, Tensor& out) {
  if (!cpu::all_fast({&x, &out})) return ref::activation(kind, x, out);
  cpu::RowView in[1], ov;
  const Tensor xk = cpu::rows_or_copy(x, in[0]);
  Tensor o = cpu::rows_for_output(out, ov);
  if (kind == Activation::gelu_erf && cpu::gelu_avx512_takes({in[0].dtype, ov.dtype})) {
    const DType xt = in[0].dtype, ot = ov.dtype;
    cpu::elementwise_unstaged<1>(in, ov, [=](const void* const* p, void* dst, int64_t n) {
      cpu::gelu_erf_row_avx512(p[0], xt, dst, ot, n);
    });
  } else {
    cpu::elementwise<1>(
        in, ov, [kind](const float* const* p, float* dst, int64_t n) { cpu::act_f32(kind, p[0], dst, n); });
  }
  cpu::finish_output(o, out);
}

void cpu::activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx) {
  if (!cpu::all_fast({&x, &dout, &dx})) return ref::activation_backward(kind, x, dout, dx);
  cpu::RowView in[2], ov;
  const Tensor xk = cpu::rows_or_copy(x, in[0]), gk = cpu::rows_or_copy(dout, in[1]);
  Tensor o = cpu::rows_for_output(dx, ov);
  if (kind == Activation::gelu_erf && cpu::gelu_avx512_takes({in[0].dtype, in[1].dtype, ov.dtype})) {
    const DType xt = in[0].dtype, gt = in[1].dtype, ot = ov.dtype;
    cpu::elementwise_unstaged<2>(in, ov, [=](const void* const* p, void* dst, int64_t n) {
      cpu::gelu_erf_backward_row_avx512(p[0], xt, p[1], gt, dst, ot, n);
    });
  } else {
    cpu::elementwise<2>(in, ov, [kind](const float* const* p, float* dst, int64_t n) {
      cpu::act_grad_f32(kind, p[0], p[1], dst, n);
    });
  }
  cpu::finish_output(o, dx);
}

// Row r of x (N*Tq rows of Tk) belongs to batch row b = (r / Tq) / H. Masked keys are left out of
// the max and the sum and written as 0; a row with no real key is uniform over all keys (what
// Hugging Face's additive finfo.min mask gives).
void cpu::masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y) {
  if (!cpu::all_fast({&x, &y}) || !key_mask.is_contiguous())
    return ref::masked_softmax(x, key_mask, scale, y);
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(y, ov);
  const int64_t R = xv.rows, Tk = xv.cols, Tq = x.size(1), H = x.size(0) / key_mask.size(0);
  const int32_t* mask = key_mask.data<int32_t>();
  // Keys past the last real one of a batch row are masked: their exponentials are 0 and add
  // nothing, so each row is computed over its first n_eff keys and the rest written as 0. n_eff
  // is that length rounded up to whole 16-lane groups (the blocked sum's lanes and sub-totals
  // then see the same values in the same order: bit for bit the whole row's result), or Tk when
  // the rounding would reach the sum's tail, or when a row spans several of the sum's blocks
  // (their pairwise tree depends on the block count). Right padding makes this the padded fraction.
  const int64_t Bm = key_mask.size(0), full16 = Tk <= cpu::kSumBlock ? Tk - Tk % 16 : 0;
  std::vector<int64_t> n_eff(static_cast<size_t>(Bm));
  for (int64_t b = 0; b < Bm; ++b) {
    const int64_t last = cpu::real_key_end(mask + b * Tk, Tk);
    const int64_t up = (last + 15) / 16 * 16;
    n_eff[static_cast<size_t>(b)] = last == 0 ? 0 : (up <= full16 ? up : Tk);
  }
  const int nt = cpu::threads_for(R * Tk);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = (r / Tq) / H, n = n_eff[static_cast<size_t>(b)];
    const int32_t* m = mask + b * Tk;
    float* q = cpu::out_row(ov.row(r), ov.dtype, cpu::scratch(2, Tk));
    if (n == 0) {  // no real key: every score + finfo.min rounds to finfo.min, so uniform
      std::fill(q, q + Tk, 1.f / static_cast<float>(Tk));
      cpu::store_row(q, ov.row(r), ov.dtype, Tk);
      continue;
    }
    const float* p = cpu::load_row(xv.row(r), xv.dtype, n, cpu::scratch(0, Tk));
    float* s = cpu::scratch(1, Tk);
    const float mx = cpu::avx512_forms_run() ? cpu::masked_scale_max_avx512(p, m, scale, s, n)
                                             : cpu::masked_scale_max(p, m, scale, s, n);
    const float sum = cpu::exp_sub_sum_f32(s, mx, q, n);
    const float inv = 1.f / sum;
    std::fill(q + n, q + Tk, 0.f);
    if (ov.dtype == DType::bf16) {  // q * inv rounded once, as the f32 product then store_row
      cpu::round_bf16_row_scaled(q, inv, static_cast<bf16*>(ov.row(r)), Tk);
      continue;
    }
    cpu::scale_f32(q, inv, q, n);
    cpu::store_row(q, ov.row(r), ov.dtype, Tk);
  }
  cpu::finish_output(o, y);
}

}  // namespace mixtrain
