// The CPU's row <-> head copy and dropout mask (kernels/attention_ops.h): OpenMP over rows and
// elements; the references (ref/attention_ref.cpp) are the same loops, serial.
#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {

// (B, T, n*C) rows <-> n tensors (B*H, T, D): one pass over the rows, D elements at a time.
void CpuBackend::heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) {
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

// Scales kept elements by 1/(1-p), zeroes the others; the mask is recomputed from (seed, offset)
// in backward instead of being stored.
void CpuBackend::dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) {
  // fp32 math for every float dtype, double for f64 (finite-difference checks need it).
  auto run = [&](auto values, double keep_scale) {
    const auto n = static_cast<int64_t>(values.size());
    const auto threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = counter_rng(seed, offset + static_cast<uint64_t>(i)) >= threshold;
      auto& v = values[static_cast<size_t>(i)];
      v = keep ? static_cast<std::decay_t<decltype(v)>>(v * keep_scale) : 0;
    }
    return values;
  };
  const Tensor xc = x.contiguous();
  Tensor tmp = x.dtype() == DType::f64
                   ? Tensor::from_vector(run(xc.to_doubles(), 1.0 / (1.0 - p)), xc.shape(), out.dtype(),
                                         MemCategory::workspace)
                   : Tensor::from_floats(run(xc.to_floats(), 1.0f / (1.0f - p)), xc.shape(), out.dtype(),
                                         MemCategory::workspace);
  out.copy_from(tmp);
}

}  // namespace mixtrain
