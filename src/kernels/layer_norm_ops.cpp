// Public layer norm over the last dim: argument checks, then the device's backend.
#include <cmath>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor*, Tensor*, Tensor*)>
    layer_norm{"layer_norm", ref::layer_norm, cpu::layer_norm, meta::layer_norm};
}  // namespace ops

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                Tensor* mean, Tensor* rstd, Tensor* xhat) {
  ProfileScope prof(WorkKind::normalization);
  prof.moves(detail::bytes_of({&x, &weight, &bias, &out, mean, rstd, xhat}));
  const char* op = "layer_norm";
  using detail::Arg;
  const Device dev = detail::check_defined_same_device(op, {{"x", &x},
                                                            {"weight", &weight},
                                                            {"bias", &bias},
                                                            {"out", &out},
                                                            {"mean", mean ? mean : &x},
                                                            {"rstd", rstd ? rstd : &x},
                                                            {"xhat", xhat ? xhat : &x}});
  detail::check_float(op, {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"out", &out}});
  if (mean) detail::check_f32_or_f64(op, {"mean", mean});
  if (rstd) detail::check_f32_or_f64(op, {"rstd", rstd});
  detail::check_min_dim(op, {"x", &x}, 1);
  const int64_t C = x.size(-1);
  for (const Arg& p : {Arg{"weight", &weight}, Arg{"bias", &bias}})
    if (p.t->dim() != 1 || p.t->size(0) != C)
      throw ShapeError(std::string(op) + ": " + p.name + " " + p.t->to_string() + " does not match x " +
                       x.to_string() + " last dim " + std::to_string(C));
  detail::check_same_shape(op, {"out", &out}, {"x", &x});
  if (xhat) {
    detail::check_float(op, {{"xhat", xhat}});
    detail::check_same_shape(op, {"xhat", xhat}, {"x", &x});
  }
  for (const Arg& s : {Arg{"mean", mean}, Arg{"rstd", rstd}})
    if (s.t && !detail::is_per_row_shape(*s.t, x))
      throw ShapeError(std::string(op) + ": " + s.name + " " + s.t->to_string() +
                       " must have one element per row of x " + x.to_string());
  if (!(eps >= 0.f) || !std::isfinite(eps))
    throw ArgumentError(std::string(op) + ": eps " + std::to_string(eps) + " must be finite and >= 0 (x " +
                        x.to_string() + ")");
  ops::layer_norm(dev, x, weight, bias, eps, out, mean, rstd, xhat);
}

}  // namespace mixtrain
