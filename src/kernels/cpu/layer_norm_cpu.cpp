// Fast CPU layer norm over the last dim (cpu::layer_norm): per row, staged to fp32, two
// passes (blocked mean, then blocked sum of squared deviations: biased variance, as torch), eps
// inside the square root, then one vectorised normalise-scale-shift pass.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {
MIXTRAIN_SIMD_CLONES void normalize_affine(const float* x, float mu, float rs, const float* w, const float* b,
                                           float* o, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = (x[i] - mu) * rs * w[i] + b[i];
}
// The same, also writing x-hat = (x - mu) * rs (the value o is computed from) into h.
MIXTRAIN_SIMD_CLONES void normalize_affine_xhat(const float* x, float mu, float rs, const float* w,
                                                const float* b, float* o, float* h, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xh = (x[i] - mu) * rs;
    h[i] = xh;
    o[i] = xh * w[i] + b[i];
  }
}

// A (C) parameter as a contiguous fp32 vector.
std::vector<float> param_f32(const Tensor& t) {
  if (t.is_contiguous()) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert_any(t.raw_data(), t.dtype(), v.data(), DType::f32, v.size());
    return v;
  }
  return t.to_floats();
}

// Writes per-row statistics (R) into a f32 tensor of any strides.
void write_stats(const std::vector<float>& v, Tensor* t) {
  if (!t || v.empty()) return;
  if (t->is_contiguous() && t->dtype() == DType::f32) {
    std::memcpy(t->raw_data(), v.data(), v.size() * sizeof(float));
    return;
  }
  const Tensor src = Tensor::from_floats(v, t->shape(), DType::f32, MemCategory::workspace);
  t->copy_from(src);
}

// Mean and 1/sqrt(biased variance + eps) of one fp32 row.
void layer_norm_stats(const float* x, int64_t C, float eps, float& mu, float& rs) {
  mu = sum_f32(x, C) / static_cast<float>(C);
  const float var = sum_sq_dev_f32(x, C, mu) / static_cast<float>(C);
  rs = 1.f / std::sqrt(var + eps);
}
}  // namespace
}  // namespace cpu

void cpu::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                     Tensor* mean, Tensor* rstd, Tensor* xhat) {
  const bool stats_ok = (!mean || mean->dtype() == DType::f32) && (!rstd || rstd->dtype() == DType::f32);
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype()) ||
      !cpu::fast_dtype(weight.dtype()) || !cpu::fast_dtype(bias.dtype()) || !stats_ok ||
      (xhat && !cpu::fast_dtype(xhat->dtype())))
    return ref::layer_norm(x, weight, bias, eps, out, mean, rstd, xhat);
  cpu::RowView xv, ov, hv;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(out, ov);
  Tensor h = xhat ? cpu::rows_for_output(*xhat, hv) : Tensor();
  const int64_t R = xv.rows, C = xv.cols;
  const std::vector<float> w = cpu::param_f32(weight), b = cpu::param_f32(bias);
  std::vector<float> mu(static_cast<size_t>(R)), rs(static_cast<size_t>(R));
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    const float* p = cpu::load_row(xv.row(r), xv.dtype, C, cpu::scratch(0, C));
    float* q = cpu::out_row(ov.row(r), ov.dtype, cpu::scratch(1, C));
    float m, s;
    cpu::layer_norm_stats(p, C, eps, m, s);
    if (xhat) {
      float* hq = cpu::out_row(hv.row(r), hv.dtype, cpu::scratch(2, C));
      cpu::normalize_affine_xhat(p, m, s, w.data(), b.data(), q, hq, C);
      cpu::store_row(hq, hv.row(r), hv.dtype, C);
    } else {
      cpu::normalize_affine(p, m, s, w.data(), b.data(), q, C);
    }
    cpu::store_row(q, ov.row(r), ov.dtype, C);
    mu[static_cast<size_t>(r)] = m;
    rs[static_cast<size_t>(r)] = s;
  }
  cpu::finish_output(o, out);
  if (xhat) cpu::finish_output(h, *xhat);
  cpu::write_stats(mu, mean);
  cpu::write_stats(rs, rstd);
}

}  // namespace mixtrain
