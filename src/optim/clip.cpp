// Global gradient norm and clip_grad_norm (see clip.h).
#include "mixtrain/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "optim/optim_util.h"

namespace mixtrain {

namespace {
constexpr int64_t kNormBlock = 4096;
constexpr int kLanes = 16;

// Sum of squares of one block (n <= kNormBlock) in fp32: 16 independent lane accumulators (so
// the loop vectorises without reassociation), combined in a fixed tree.
float block_sum_squares(const float* x, int64_t n) {
  float acc[kLanes] = {};
  const int64_t n16 = n - n % kLanes;
  for (int64_t i = 0; i < n16; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j] * x[i + j];
  for (int64_t i = n16; i < n; ++i) acc[i - n16] += x[i] * x[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

void scale_f32(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 16))
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s;
}
}  // namespace

double global_norm_f32(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
#pragma omp parallel for schedule(static) if (blocks > 4)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * kNormBlock;
    partial[size_t(b)] = block_sum_squares(x + start, std::min(kNormBlock, n - start));
  }
  double sum = 0.0;
  for (double v : partial) sum += v;  // block order: independent of the thread count
  return std::sqrt(sum);
}

double grad_global_norm(const ParameterStore& store) {
  if (!store.finalized()) throw ArgumentError("grad_global_norm: the parameter store is not finalized");
  const Tensor& g = store.flat_grads();
  if (g.dtype() != DType::f32) throw DTypeError("grad_global_norm: gradients must be f32, got " + g.to_string());
  return global_norm_f32(g.data<float>(), g.numel());
}

double clip_grad_norm(ParameterStore& store, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw ArgumentError("clip_grad_norm: max_norm must be > 0 and finite, got " + optim_detail::fmt(max_norm));
  const double total = grad_global_norm(store);
  if (!std::isfinite(total)) return total;
  const double clip_coef = max_norm / (total + 1e-6);
  if (clip_coef < 1.0) {
    const Tensor& g = store.flat_grads();
    scale_f32(g.data<float>(), g.numel(), float(clip_coef));
  }
  return total;
}

}  // namespace mixtrain
