// Fast CPU softmax over the last dim (cpu::softmax_last): one row per work item, staged to
// fp32, max-subtracted, exp and blocked sum in one vectorised pass, then a scale by 1/sum.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {
MIXTRAIN_SIMD_CLONES void scale_inplace(float* o, float s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] *= s;
}

// Softmax of one fp32 row x (C) into o (C); o may be x.
void softmax_row(const float* x, float* o, int64_t C) {
  const float m = max_f32(x, C);
  const float sum = exp_sub_sum_f32(x, m, o, C);
  scale_inplace(o, 1.f / sum, C);
}
}  // namespace
}  // namespace cpu

void cpu::softmax_last(const Tensor& x, Tensor& out) {
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype()))
    return ref::softmax_last(x, out);
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(out, ov);
  const int64_t R = xv.rows, C = xv.cols;
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const float* p = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
    float* q = cpu::out_row(ov.row(r), ov.dtype, cpu::scratch(1, C));
    cpu::softmax_row(p, q, C);
    cpu::store_row(q, ov.row(r), ov.dtype, C);
  }
  cpu::finish_output(o, out);
}

}  // namespace mixtrain
