// The machinery shared by the 16-bit (*-true) optimizer kernels, private to the kernels: the
// per-format load/round functions, the reference write of one parameter (nearest, stochastic or
// Kahan, see optim/lowp.h), and the fast driver that runs an fp32 span kernel over 16-bit chunks.
//
// Fast == reference bit for bit: the bulk conversions are bit-identical to the scalar ones
// (numeric/convert.h), the fp32 span kernels to their element functions, the stochastic bulk
// conversion draws counter_rng(seed, offset + i) exactly as the scalar write does, and every
// element is independent, so neither the chunking nor the thread count changes a bit.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain::optim_detail {

// Work items of at most this many elements: big enough to amortise the loop set-up, small enough
// that a static schedule balances a few large matrices against many small vectors.
constexpr int64_t kPieceNumel = 16384;

template <class T>
struct Lowp;
template <>
struct Lowp<bf16> {
  static float load(bf16 h) { return f32_from_bf16(h); }
  static bf16 nearest(float f) { return bf16_from_f32(f); }
  static bf16 stochastic(float f, uint32_t bits) { return bf16_from_f32_stochastic(f, bits); }
  static void load_n(const bf16* s, float* d, int64_t n) { convert_bf16_to_f32(s, d, size_t(n)); }
  static void nearest_n(const float* s, bf16* d, int64_t n) { convert_f32_to_bf16(s, d, size_t(n)); }
  static void stochastic_n(const float* s, bf16* d, int64_t n, uint64_t seed, uint64_t offset) {
    convert_f32_to_bf16_stochastic(s, d, size_t(n), seed, offset);
  }
};
template <>
struct Lowp<fp16> {
  static float load(fp16 h) { return f32_from_fp16(h); }
  static fp16 nearest(float f) { return fp16_from_f32(f); }
  static fp16 stochastic(float f, uint32_t bits) { return fp16_from_f32_stochastic(f, bits); }
  static void load_n(const fp16* s, float* d, int64_t n) { convert_fp16_to_f32(s, d, size_t(n)); }
  static void nearest_n(const float* s, fp16* d, int64_t n) { convert_f32_to_fp16(s, d, size_t(n)); }
  static void stochastic_n(const float* s, fp16* d, int64_t n, uint64_t seed, uint64_t offset) {
    convert_f32_to_fp16_stochastic(s, d, size_t(n), seed, offset);
  }
};

// Kahan-compensated write (see optim/lowp.h): `old` is the stored parameter as fp32, x the fp32
// kernel's new value, c the compensation of this element. Returns the new 16-bit parameter.
template <class T>
inline T kahan_write(float old, float x, T& c) {
  const float y = (x - old) + Lowp<T>::load(c);
  const T p = Lowp<T>::nearest(old + y);
  c = Lowp<T>::nearest(y - (Lowp<T>::load(p) - old));
  return p;
}

// The reference write of parameter element i (flat index): c is the compensation buffer
// (kahan only).
template <class T>
inline T write_param_ref(float old, float x, T* c, const LowpWrite& w, int64_t i) {
  switch (w.rounding) {
    case UpdateRounding::stochastic:
      return Lowp<T>::stochastic(x, counter_rng(w.seed, w.counter_base + uint64_t(i)));
    case UpdateRounding::kahan:
      return kahan_write(old, x, c[i]);
    case UpdateRounding::nearest:
    case UpdateRounding::master:  // not a 16-bit in-place write: check_lowp_write refuses it
      break;
  }
  return Lowp<T>::nearest(x);
}

// Elements per chunk of the fast driver: 5 fp32 scratch rows of 2 KiB stay in L1, and the bulk
// conversions stay serial (far below their OpenMP threshold).
constexpr int64_t kLowpChunk = 512;

// Runs kernel(p, g, s0, s1, n), an fp32 span kernel, over the 16-bit span `sp` of the flat
// buffers: each chunk is loaded to fp32 scratch, updated, and written back (state s0, s1 to
// nearest; the parameters per w, with c the compensation for kahan). s0 / s1 may be null (then
// the kernel gets null too).
template <class T, class Kernel>
void lowp_span_fast(T* p, const T* g, T* s0, T* s1, T* c, const FlatSpan& sp, const LowpWrite& w,
                    Kernel&& kernel) {
  alignas(64) float pf[kLowpChunk], old[kLowpChunk], gf[kLowpChunk], f0[kLowpChunk], f1[kLowpChunk];
  for (int64_t off = 0; off < sp.numel; off += kLowpChunk) {
    const int64_t i0 = sp.offset + off, n = std::min(kLowpChunk, sp.numel - off);
    Lowp<T>::load_n(p + i0, old, n);
    std::memcpy(pf, old, size_t(n) * sizeof(float));
    Lowp<T>::load_n(g + i0, gf, n);
    if (s0) Lowp<T>::load_n(s0 + i0, f0, n);
    if (s1) Lowp<T>::load_n(s1 + i0, f1, n);
    kernel(pf, gf, s0 ? f0 : nullptr, s1 ? f1 : nullptr, n);
    if (s0) Lowp<T>::nearest_n(f0, s0 + i0, n);
    if (s1) Lowp<T>::nearest_n(f1, s1 + i0, n);
    switch (w.rounding) {
      case UpdateRounding::nearest:
      case UpdateRounding::master:  // not a 16-bit in-place write: check_lowp_write refuses it
        Lowp<T>::nearest_n(pf, p + i0, n);
        break;
      case UpdateRounding::stochastic:
        Lowp<T>::stochastic_n(pf, p + i0, n, w.seed, w.counter_base + uint64_t(i0));
        break;
      case UpdateRounding::kahan:
        for (int64_t j = 0; j < n; ++j) p[i0 + j] = kahan_write(old[j], pf[j], c[i0 + j]);
        break;
    }
  }
}

// Runs kernel(gf, i0, n) over the span `sp` of 16-bit gradients g in chunks: gf holds the
// chunk's n gradients [i0, i0 + n) loaded to fp32 (the fp32 master kernels, UpdateRounding::master).
template <class T, class Kernel>
void master_span_fast(const T* g, const FlatSpan& sp, Kernel&& kernel) {
  alignas(64) float gf[kLowpChunk];
  for (int64_t off = 0; off < sp.numel; off += kLowpChunk) {
    const int64_t i0 = sp.offset + off, n = std::min(kLowpChunk, sp.numel - off);
    Lowp<T>::load_n(g + i0, gf, n);
    kernel(static_cast<const float*>(gf), i0, n);
  }
}

// f(piece) for every piece of at most kPieceNumel elements, OpenMP static schedule.
template <class F>
void for_each_piece(const std::vector<FlatSpan>& spans, F&& f) {
  const std::vector<FlatSpan> pieces = split_spans(spans, kPieceNumel);
  const int64_t n = int64_t(pieces.size());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i) f(pieces[size_t(i)]);
}

// ArgumentError unless c is given for kahan; ArgumentError for master (not a 16-bit in-place write).
void check_lowp_write(const void* c, const LowpWrite& w, const char* op);
// The fp32 master kernels' output: ArgumentError without one, DTypeError unless of grad_dtype.
void check_master_out(const WorkingCopyOut& working, DType grad_dtype, const char* op);

}  // namespace mixtrain::optim_detail
