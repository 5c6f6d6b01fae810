// Fast CPU cross-entropy from logits (cpu::cross_entropy): per row, staged to fp32,
// log-sum-exp with the max subtracted (exp and blocked sum in one vectorised pass); the mean over
// non-ignored rows is a blocked sum of the per-row losses, so it is thread-count independent.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {
// Checks every target before any thread starts; returns the number of non-ignored rows.
int64_t check_targets(const int32_t* t, int64_t R, int64_t V) {
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (t[r] == -1) continue;
    if (t[r] < 0 || t[r] >= V)
      throw ArgumentError("cross_entropy: target " + std::to_string(t[r]) + " in row " + std::to_string(r) +
                          " is outside [0, " + std::to_string(V) + ")");
    ++count;
  }
  return count;
}

// log(sum(exp(x))) of one fp32 row, max-subtracted; e (C) receives exp(x - max).
float log_sum_exp_row(const float* x, float* e, int64_t C) {
  const float m = max_f32(x, C);
  return m + std::log(exp_sub_sum_f32(x, m, e, C));
}
}  // namespace
}  // namespace cpu

double cpu::cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) {
  if (force_reference() || !cpu::fast_dtype(logits.dtype()) || (losses && losses->dtype() != DType::f32))
    return ref::cross_entropy(logits, targets, losses);
  cpu::RowView xv;
  const Tensor xk = cpu::rows_or_copy(logits, xv);
  const Tensor tk = targets.contiguous();
  const int32_t* tgt = static_cast<const int32_t*>(tk.raw_data());
  const int64_t R = xv.rows, V = xv.cols;
  const int64_t count = cpu::check_targets(tgt, R, V);
  std::vector<float> loss(static_cast<size_t>(R), 0.f);
  const int nt = cpu::threads_for(R * V);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = tgt[r];
    if (t == -1) continue;
    const float* p = cpu::load_row(xv.row(r), xv.dtype, V, cpu::scratch(0, V));
    loss[static_cast<size_t>(r)] = cpu::log_sum_exp_row(p, cpu::scratch(1, V), V) - p[t];
  }
  if (losses && R > 0) {
    if (losses->is_contiguous())
      std::memcpy(losses->raw_data(), loss.data(), loss.size() * sizeof(float));
    else
      losses->copy_from(Tensor::from_floats(loss, losses->shape(), DType::f32, MemCategory::workspace));
  }
  if (count == 0) return 0.0;
  return static_cast<double>(cpu::sum_f32(loss.data(), R) / static_cast<float>(count));
}

}  // namespace mixtrain
