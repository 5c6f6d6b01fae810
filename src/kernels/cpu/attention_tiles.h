// What the two fused attentions on bf16 tiles share (attention_fused_cpu.cpp: causal, with the
// probabilities kept; attention_masked_cpu.cpp: the encoder's key mask and dropout, nothing kept):
// blocks of 32 query rows, operands staged as the tiles take them, outputs rounded once, and one
// parallel loop over heads with a row of workspace per thread.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::cpu::attn {

constexpr int64_t kRows = 32;  // query rows (and keys) per block: the tile GEMMs' unit

inline bf16* as_bf16(float* base, int64_t off) { return reinterpret_cast<bf16*>(base + off); }

inline int fused_threads(int64_t heads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), heads)));
}

// The operand types: bf16 as it is, f32 through bf16 (medium's products: each input rounded once).
template <class IO>
constexpr DType io_dtype() {
  return std::is_same_v<IO, bf16> ? DType::bf16 : DType::f32;
}

// One head's operand (T x D, row stride ld) as the tiles take it: bf16 in place, f32 rounded into
// `stage` (T x D); returns the rows and their stride.
struct Rows {
  const bf16* p;
  int64_t ld;
};
inline Rows tile_input(const bf16* x, int64_t ld, int64_t, int64_t, bf16*) { return {x, ld}; }
inline Rows tile_input(const float* x, int64_t ld, int64_t T, int64_t D, bf16* stage) {
  for (int64_t t = 0; t < T; ++t) cpu::round_bf16_row(x + t * ld, stage + t * D, D);
  return {stage, D};
}
// The same into `stage` (Tp x D, Tp >= T) always, rows [T, Tp) zero: operands whose length is not
// a whole number of blocks.
template <class IO>
void stage_padded(const IO* x, int64_t ld, int64_t T, int64_t Tp, int64_t D, bf16* stage) {
  for (int64_t t = 0; t < T; ++t) {
    if constexpr (std::is_same_v<IO, bf16>)
      std::memcpy(stage + t * D, x + t * ld, static_cast<size_t>(D) * sizeof(bf16));
    else
      cpu::round_bf16_row(x + t * ld, stage + t * D, D);
  }
  std::memset(static_cast<void*>(stage + T * D), 0, static_cast<size_t>((Tp - T) * D) * sizeof(bf16));
}
inline void store_out(const float* src, bf16* dst, int64_t n) { cpu::round_bf16_row(src, dst, n); }
inline void store_out(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
// R rows of D (contiguous in src) into rows of stride ld.
template <class IO>
void store_rows(const float* src, int64_t R, int64_t D, IO* dst, int64_t ld) {
  for (int64_t r = 0; r < R; ++r) store_out(src + r * D, dst + r * ld, D);
}
// R rows (dk or dv, row stride ld) from their transpose t (D x R f32, row stride ldt), each element
// rounded once; tmp: R x D f32.
template <class IO>
void store_transposed(const float* t, int64_t ldt, int64_t R, int64_t D, IO* out, int64_t ld, float* tmp) {
  tiles::transpose32(reinterpret_cast<const uint32_t*>(t), ldt, D, R, reinterpret_cast<uint32_t*>(tmp), D);
  store_rows(tmp, R, D, out, ld);
}
inline void load_row(const bf16* src, float* dst, int64_t n) { cpu::widen_bf16_row(src, dst, n); }
inline void load_row(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

// The heads of a (n, T, D) contiguous tensor or a (B, H, T, D) view with unit stride in D (q, k
// or v read in place out of a (B, T, 3C) projection; y, dq, dk, dv written in place into rows):
// head i starts at (i / H) * sb + (i % H) * sh, its rows ld apart.
struct HeadLayout {
  int64_t H, sb, sh, ld;
  explicit HeadLayout(const Tensor& t) {
    const bool four = t.dim() == 4;
    H = four ? t.size(1) : 1;
    sb = t.stride(0);
    sh = four ? t.stride(1) : 0;
    ld = t.stride(four ? 2 : 1);
  }
  int64_t at(int64_t i) const { return (i / H) * sb + (i % H) * sh; }
};
inline int64_t heads_of(const Tensor& t) { return t.dim() == 4 ? t.size(0) * t.size(1) : t.size(0); }

inline const tiles::Kernels& kernels_here() {
  return tiles::amx_usable() ? tiles::amx_kernels() : tiles::reference_kernels();
}

// body(h, w) for every head h, the heads shared out dynamically, w the thread's row of the workspace
// (ws: threads x per f32); the tile configuration loaded once per thread.
template <class Body>
void for_each_head(const tiles::Kernels& tk, Tensor& ws, int64_t n, const Body& body) {
  const int64_t per = ws.size(1);
  float* W = ws.data<float>();
  const int nt = static_cast<int>(ws.size(0));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    float* w = W + omp_get_thread_num() * per;
    tk.begin();
#pragma omp for schedule(dynamic, 1)
    for (int64_t h = 0; h < n; ++h) body(h, w);
    tk.end();
  }
}

}  // namespace mixtrain::cpu::attn
