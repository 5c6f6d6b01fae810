// The CPU's row <-> head copy and dropout mask (kernels/attention_ops.h): OpenMP over rows and
// elements; the references (ref/attention_ref.cpp) are the same loops, serial.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/attention_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {

// (B, T, n*C) rows <-> n tensors (B*H, T, D): one pass over the rows, D elements at a time.
void cpu::heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) {
  const int64_t B = rows.size(0), T = rows.size(1), W = rows.size(2), n = static_cast<int64_t>(heads.size());
  const int64_t C = W / n, D = C / H;
  const size_t es = dtype_size(rows.dtype()), row_bytes = static_cast<size_t>(D) * es;
  char* r = static_cast<char*>(rows.raw_data());
  std::vector<char*> hp;
  for (const Tensor& h : heads) hp.push_back(static_cast<char*>(h.raw_data()));
#pragma omp parallel for schedule(static) if (B * T * W >= (1 << 16))
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t h = 0; h < H; ++h) {
        char* row = r + static_cast<size_t>(bt * W + p * C + h * D) * es;
        char* head = hp[static_cast<size_t>(p)] + static_cast<size_t>(((b * H + h) * T + t) * D) * es;
        if (to_heads)
          std::memcpy(head, row, row_bytes);
        else
          std::memcpy(row, head, row_bytes);
      }
  }
}

namespace {

// o[i] = x[i] / (1 - p) where element first + i is kept, else 0 (the keep test vectorises: 64-bit
// multiplies of splitmix64 in AVX-512 lanes).
MIXTRAIN_SIMD_CLONES void dropout_f32(const float* x, float* o, int64_t n, uint64_t key, uint64_t first,
                                      uint64_t threshold, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    o[i] = detail::counter_rng_keyed(key, first + static_cast<uint64_t>(i)) >= threshold ? x[i] * scale : 0.f;
}

}  // namespace

// Defined inside namespace cpu, not as cpu::dropout_factors: clang (the fuzz build) emits no
// callable symbol for a target_clones definition named by a qualified name.
namespace cpu {
MIXTRAIN_SIMD_CLONES void dropout_factors(float* f, int64_t n, uint64_t key, uint64_t first,
                                          uint64_t threshold, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    f[i] = detail::counter_rng_keyed(key, first + static_cast<uint64_t>(i)) >= threshold ? scale : 0.f;
}
}  // namespace cpu

// Scales kept elements by 1/(1-p), zeroes the others; the mask is recomputed from (seed, offset)
// in backward instead of being stored. Rows staged to fp32 a chunk at a time; element (r, c) of the
// (R, C) row view is x's element r * C + c in row-major order, as the reference counts them.
void cpu::dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) {
  if (!cpu::all_fast({&x, &out})) return ref::dropout_mask(x, p, seed, offset, out);  // f64: double math
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(out, ov);
  const int64_t R = xv.rows, C = xv.cols, chunks = (C + cpu::kChunk - 1) / cpu::kChunk;
  const uint64_t key = detail::counter_rng_key(seed);
  const uint64_t threshold = dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t item = 0; item < R * chunks; ++item) {
    const int64_t r = item / chunks, c0 = (item % chunks) * cpu::kChunk, w = std::min(cpu::kChunk, C - c0);
    float buf[cpu::kChunk], obuf[cpu::kChunk];
    const float* src = cpu::load_row(xv.at(r, c0), xv.dtype, w, buf);
    float* dst = cpu::out_row(ov.at(r, c0), ov.dtype, obuf);
    dropout_f32(src, dst, w, key, offset + static_cast<uint64_t>(r * C + c0), threshold, scale);
    cpu::store_row(dst, ov.at(r, c0), ov.dtype, w);
  }
  cpu::finish_output(o, out);
}

}  // namespace mixtrain
