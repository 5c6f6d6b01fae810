// Building blocks of the fast CPU kernels (cpu/*_cpu.cpp), shared by the forward kernels and the
// backward kernels that follow them: (R, C) row views of tensors whose last dim is contiguous,
// fp32 staging of 16-bit rows, the threading policy, a vectorisable exp, and the blocked sums.
//
// Precision: storage may be bf16/f16, every row is converted to fp32, all math and accumulation is
// fp32, and the result is rounded once into the output's dtype.
// Determinism: work is split into fixed pieces (rows, 4096-element blocks, column chunks) whose
// results never depend on the thread count, so every kernel gives bit-identical results for any
// number of threads.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/tensor/tensor.h"

// The library is built for plain x86-64; hot loops get AVX-512 and AVX2 (+FMA) clones, picked once
// at load time by the dynamic loader (ifunc).
#define MIXTRAIN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace mixtrain::cpu {

// The storage formats the fast kernels handle; f64 and fp8 go to the scalar reference.
inline bool fast_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
// Whether a kernel takes its fast path for these tensors: every one in a fast dtype, and the
// references not forced (core/cpu_features.h).
inline bool all_fast(std::initializer_list<const Tensor*> ts) {
  if (force_reference()) return false;
  for (const Tensor* t : ts)
    if (!fast_dtype(t->dtype())) return false;
  return true;
}

// A tensor seen as R rows of C contiguous elements, row r at base + r * row_stride elements.
struct RowView {
  char* base = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 1;        // R
  int64_t cols = 1;        // C
  int64_t row_stride = 0;  // in elements
  void* row(int64_t r) const { return base + r * row_stride * static_cast<int64_t>(dtype_size(dtype)); }
  void* at(int64_t r, int64_t c) const {
    return base + (r * row_stride + c) * static_cast<int64_t>(dtype_size(dtype));
  }
};

// The (R, C) view of t (..., C) when its last dim is contiguous and its leading dims collapse into
// one stride (true for contiguous tensors and for slices of the last dim); false otherwise.
inline bool as_rows(const Tensor& t, RowView& v) {
  v.base = static_cast<char*>(t.raw_data());
  v.dtype = t.dtype();
  if (t.dim() == 0) {
    v.rows = v.cols = 1;
    v.row_stride = 1;
    return true;
  }
  v.cols = t.size(-1);
  if (v.cols > 1 && t.stride(-1) != 1) return false;
  v.rows = 1;
  v.row_stride = v.cols;
  bool have_inner = false;
  int64_t expect = 0;  // the stride the next outer non-trivial dim must have
  for (int d = t.dim() - 2; d >= 0; --d) {
    const int64_t n = t.size(d);
    v.rows *= n;
    if (n == 1) continue;
    if (!have_inner) {
      v.row_stride = t.stride(d);
      have_inner = true;
    } else if (t.stride(d) != expect) {
      return false;
    }
    expect = t.stride(d) * n;
  }
  return true;
}

// The row view of t, or of a contiguous copy of it (returned, to keep it alive) when t's layout
// has no row view. Returns t itself when no copy was needed.
inline Tensor rows_or_copy(const Tensor& t, RowView& v) {
  if (as_rows(t, v)) return t;
  Tensor c = t.contiguous();
  as_rows(c, v);
  return c;
}
// A tensor to write the result of out into: out itself when it has a row view, else a contiguous
// workspace tensor that finish_output() copies back.
inline Tensor rows_for_output(const Tensor& out, RowView& v) {
  if (as_rows(out, v)) return out;
  Tensor o = Tensor::empty(out.shape(), out.dtype(), MemCategory::workspace);
  as_rows(o, v);
  return o;
}
inline void finish_output(const Tensor& written, Tensor& out) {
  if (written.raw_data() != out.raw_data()) out.copy_from(written);
}

// Fast-path threading: split only when each thread gets at least kMinWorkPerThread elements, so
// small tensors stay on the calling thread.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;
inline int threads_for(int64_t work_elems) {
  const int64_t by_work = work_elems / kMinWorkPerThread;
  const int nt = num_threads();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nt, by_work)));
}

// Per-thread fp32 scratch rows, grown on demand and kept (one slot per simultaneous row).
inline float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> bufs[4];
  std::vector<float>& b = bufs[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// n elements at src in dtype t as fp32: src itself when t is f32, else converted into buf.
// bf16 rows are widened and rounded by two small vectorised loops (AVX-512 where the CPU has it,
// elementwise_cpu.cpp) called directly: the rows here are short (a 64-column chunk, one row of C),
// and the bulk converter's dispatch and chunking per row cost more than the conversion itself
// (sum_to_row of bf16 bias gradients spent 3.6% of a bf16-mixed step in those calls).
void widen_bf16_row(const bf16* src, float* dst, int64_t n);
void round_bf16_row(const float* src, bf16* dst, int64_t n);  // round to nearest even, as bf16_from_f32
void round_bf16_row_scaled(const float* src, float s, bf16* dst, int64_t n);  // dst = bf16(src * s)
void scale_f32(const float* a, float s, float* o, int64_t n);                 // o = s * a (o may be a)

inline const float* load_row(const void* src, DType t, int64_t n, float* buf) {
  if (t == DType::f32) return static_cast<const float*>(src);
  if (t == DType::bf16) {
    widen_bf16_row(static_cast<const bf16*>(src), buf, n);
    return buf;
  }
  convert_any(src, t, buf, DType::f32, static_cast<size_t>(n));
  return buf;
}
// Where to compute an output row: the output itself when it is f32, else buf (then store_row).
inline float* out_row(void* dst, DType t, float* buf) {
  return t == DType::f32 ? static_cast<float*>(dst) : buf;
}
// Rounds an fp32 row computed by out_row into the output's dtype (no-op when it was computed in place).
inline void store_row(const float* src, void* dst, DType t, int64_t n) {
  if (t == DType::bf16) {
    round_bf16_row(src, static_cast<bf16*>(dst), n);
  } else if (t != DType::f32)
    convert_any(src, DType::f32, dst, t, static_cast<size_t>(n));
  else if (src != dst)
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

constexpr int64_t kChunk = 2048;  // elements per elementwise work item

inline bool flat(const RowView& v) { return v.rows == 1 || v.row_stride == v.cols; }

// The work items of elementwise (below): g(r, c0, w) for row r's columns [c0, c0 + w), in parallel.
template <int N, typename G>
void for_each_chunk(RowView (&in)[N], RowView& out, G g) {
  bool all_flat = flat(out);
  for (const RowView& v : in) all_flat = all_flat && flat(v) && v.row_stride != 0;
  if (all_flat && out.rows > 1) {
    for (RowView& v : in) v.cols *= v.rows, v.rows = 1;
    out.cols *= out.rows;
    out.rows = 1;
  }
  const int64_t R = out.rows, C = out.cols;
  const int64_t chunks = (C + kChunk - 1) / kChunk;
  const int nt = threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t item = 0; item < R * chunks; ++item) {
    const int64_t r = item / chunks, c0 = (item % chunks) * kChunk;
    g(r, c0, std::min(kChunk, C - c0));
  }
}

// out = f(in[0], ..., in[N-1]) elementwise over (R, C) views, in (row, column chunk) work items of
// kChunk elements staged in fp32 on the stack; an input with row_stride 0 is a row broadcast over R.
// Contiguous operands are treated as one long row so that work items are full chunks. The split
// does not depend on the thread count, so results do not either.
template <int N, typename F>
void elementwise(RowView (&in)[N], RowView out, F f) {
  for_each_chunk<N>(in, out, [&](int64_t r, int64_t c0, int64_t w) {
    float bufs[N][kChunk];
    float obuf[kChunk];
    const float* p[N];
    for (int k = 0; k < N; ++k) p[k] = load_row(in[k].at(r, c0), in[k].dtype, w, bufs[k]);
    float* o = out_row(out.at(r, c0), out.dtype, obuf);
    f(p, o, w);
    store_row(o, out.at(r, c0), out.dtype, w);
  });
}

// The same walk with no staging: f(p, o, w) gets the operands' own elements (p[k] at in[k]'s
// dtype, o at out's), for kernels that read and write 16-bit rows themselves.
template <int N, typename F>
void elementwise_unstaged(RowView (&in)[N], RowView out, F f) {
  for_each_chunk<N>(in, out, [&](int64_t r, int64_t c0, int64_t w) {
    const void* p[N];
    for (int k = 0; k < N; ++k) p[k] = in[k].at(r, c0);
    f(p, out.at(r, c0), w);
  });
}

// exp(x) in fp32, branch-free so loops that call it vectorise (Cephes expf: x = n ln2 + r with
// a two-part ln2, degree-6 polynomial for exp(r), 2^n built in the exponent bits; ~1 ulp).
// Overflow gives inf, underflow below the normal range gives 0, NaN stays NaN.
[[gnu::always_inline]] inline float exp_f32(float x) {
  constexpr float kHi = 88.72283935546875f, kLo = -87.3365478515625f;  // ~ln(FLT_MAX), ln(FLT_MIN)
  const float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round(x / ln2), in [-126, 128]
  const float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // 2^n from the exponent bits; n = 128 has no exponent code, so it is taken as 2^127 * 2.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t top = ni > 127 ? 1 : 0;
  const float pow2 = std::bit_cast<float>(static_cast<uint32_t>(ni - top + 127) << 23);
  float y = p * pow2 * (top ? 2.f : 1.f);
  y = x > kHi ? __builtin_inff() : y;
  y = x < kLo ? 0.f : y;
  return x != x ? x : y;
}

// erf(x) in fp32, branch-free so loops that call it vectorise (the C library's erff is scalar and
// was a fifth of a BERT fine-tune's step). a = |x| clamped to 4 (erf(4) rounds to 1), then
//   a < 1:  erf(a) = a + a * P(a^2)            (P fits erf(a)/a - 1)
//   a >= 1: erf(a) = 1 - exp(-a^2) * G(1/a)    (G fits erfc(a) exp(a^2), slowly varying)
// both computed, one kept, the sign put back. Coefficients and their error from tools/fit_erf.py;
// measured against double erf within 1.5 ulp (tests/kernels/encoder_ops_test.cpp). NaN stays NaN.
// (gelu_avx512.cpp evaluates the same two polynomials.)
inline constexpr float kErfP[7] = {1.283791661e-01f, -3.761262894e-01f, 1.128362566e-01f, -2.685539983e-02f,
                                   5.191218574e-03f, -8.034846396e-04f, 7.933493907e-05f};
inline constexpr float kErfcG[10] = {
    1.335118286e-04f, 5.615409613e-01f,  2.232113481e-02f, -3.838005066e-01f, 2.523991168e-01f,
    1.988486648e-01f, -4.910222888e-01f, 4.048019946e-01f, -1.658622175e-01f, 2.822321840e-02f};
[[gnu::always_inline]] inline float erf_f32(float x) {
  const float ax = x < 0.f ? -x : x;
  const float a = ax > 4.f ? 4.f : ax;
  const float s = a * a;
  float p = kErfP[6];
  for (int i = 5; i >= 0; --i) p = p * s + kErfP[i];
  const float small = a * p + a;
  const float u = 1.f / (a < 1.f ? 1.f : a);
  float g = kErfcG[9];
  for (int i = 8; i >= 0; --i) g = g * u + kErfcG[i];
  const float large = 1.f - exp_f32(-s) * g;
  const float r = a < 1.f ? small : large;
  return x != x ? x : (x < 0.f ? -r : r);
}

// ---- blocked sums (defined in reduce_cpu.cpp) ----------------------------------------------------
// Sums run over fixed kSumBlock-element blocks (16 fp32 lanes inside a block), and the block sums
// are added pairwise: error grows like log(n), and the result depends only on the data.
constexpr int64_t kSumBlock = 4096;
constexpr int kSumLanes = 16;                // fp32 lanes inside a block
constexpr int64_t kSumSub = 16 * kSumLanes;  // the run a lane sums into a sub-total before its total
// The 16 lane sums added in a fixed tree (8, 4, 2, 1): every blocked sum ends with it.
inline float combine_lanes(float* acc) {
  for (int w = kSumLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
float sum_f32(const float* p, int64_t n);
// sum of (p[i] - mu)^2: the variance pass of layer norm; mu = 0 gives the sum of squares.
float sum_sq_dev_f32(const float* p, int64_t n, float mu);
// Largest element; NaN if any element is NaN; -inf for n = 0.
float max_f32(const float* p, int64_t n);
// Adds per-block partial sums with the same pairwise tree sum_f32 uses over its blocks.
float pairwise_sum(const float* partials, int64_t n);
// out[i] = exp(x[i] - m); returns the blocked sum of out. (Softmax numerators, log-sum-exp.)
float exp_sub_sum_f32(const float* x, float m, float* out, int64_t n);

// ---- the softmax row loops of causal_softmax(_backward) (defined in backward_cpu.cpp) ------------
void exp_scaled_sub(const float* x, float scale, float m, float* o, int64_t n);  // o = exp(scale x - m)
void scale_copy(const float* x, float s, float* o, int64_t n);                   // o = s x
// Stores src[0:n) * s and src[n:total) as they are into a row of dtype t (one rounding each).
void store_row_scaled(float* src, float s, void* dst, DType t, int64_t n, int64_t total);
void mul_rows(const float* a, const float* b, float* o, int64_t n);  // o = a b
// o = scale * y * (dy - dot)
void softmax_bwd_row(const float* y, const float* dy, float dot, float scale, float* o, int64_t n);

// ---- the masked softmax's and the dropout's row loops (encoder_cpu.cpp, attention_cpu.cpp) -------
// The end of a key mask row's real keys: keys [0, end) hold every real (non-zero) one of m[0, T).
inline int64_t real_key_end(const int32_t* m, int64_t T) {
  while (T > 0 && m[T - 1] == 0) --T;
  return T;
}
// s[j] = scale * p[j] where key mask m[j] != 0, else -inf; returns the largest s (NaN when one is
// NaN). The portable form; softmax_avx512.h has the AVX-512 one (the same values).
float masked_scale_max(const float* p, const int32_t* m, float scale, float* s, int64_t n);
// f[i] = scale where element first + i is kept (counter_rng_keyed(key, first + i) >= threshold),
// else 0: dropout_mask's factors, x * f[i] its output.
void dropout_factors(float* f, int64_t n, uint64_t key, uint64_t first, uint64_t threshold, float scale);

}  // namespace mixtrain::cpu
