// Global gradient norm and clip_grad_norm, for f32 and any-dtype gradients (see clip.h).
#include "mixtrain/optim/clip.h"

#include <cmath>
#include <string>

#include "kernels/gradient_kernels.h"
#include "kernels/optimizer_ops.h"
#include "mixtrain/kernels/ops.h"
#include "optim/optim_util.h"

namespace mixtrain {

double grad_global_norm(const ParameterStore& store) {
  if (!store.finalized()) throw ArgumentError("grad_global_norm: the parameter store is not finalized");
  const Tensor& g = store.flat_grads();
  if (g.dtype() != DType::f32)
    throw DTypeError("grad_global_norm: gradients must be f32, got " + g.to_string());
  return ops::global_norm(g.device(), g);
}

double clip_grad_norm(ParameterStore& store, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw ArgumentError("clip_grad_norm: max_norm must be > 0 and finite, got " +
                        optim_detail::fmt(max_norm));
  const double total = grad_global_norm(store);
  if (!std::isfinite(total)) return total;
  const double clip_coef = max_norm / (total + 1e-6);
  if (clip_coef < 1.0) {
    Tensor g = store.flat_grads();
    scale(g, float(clip_coef), g);  // fp32(g * coef), in place
  }
  return total;
}

double grad_norm_any_dtype(const ParameterStore& p) {
  if (p.flat_grads().dtype() == DType::f32) return grad_global_norm(p);
  return std::sqrt(reduce(p.flat_grads(), ReduceOp::sum_squares));
}

double clip_grad_norm_any_dtype(ParameterStore& p, double max_norm) {
  if (p.flat_grads().dtype() == DType::f32) return clip_grad_norm(p, max_norm);
  const double norm = grad_norm_any_dtype(p);
  const double coef = max_norm / (norm + 1e-6);
  if (std::isfinite(norm) && coef < 1.0) {
    Tensor g = p.flat_grads();
    scale(g, static_cast<float>(coef), g);
  }
  return norm;
}

}  // namespace mixtrain
