// Public encoder ops (ops.h activation; ops_backward.h activation_backward, masked_softmax):
// argument checks with one-line messages naming the op and the shapes, then the device's backend.
#include <cmath>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ops_backward.h"
#include "mixtrain/core/profiler.h"

namespace mixtrain {
namespace ops {
const Op<void(Activation, const Tensor&, Tensor&)> activation{"activation", ref::activation, cpu::activation,
                                                              meta::activation};
const Op<void(Activation, const Tensor&, const Tensor&, Tensor&)> activation_backward{
    "activation_backward", ref::activation_backward, cpu::activation_backward, meta::activation_backward};
const Op<void(const Tensor&, const Tensor&, float, Tensor&)> masked_softmax{
    "masked_softmax", ref::masked_softmax, cpu::masked_softmax, meta::masked_softmax};
}  // namespace ops

void activation(Activation kind, const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
  const char* op = "activation";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"out", &out}});
  detail::check_float(op, {{"x", &x}, {"out", &out}});
  detail::check_same_shape(op, {"out", &out}, {"x", &x});
  ops::activation(dev, kind, x, out);
}

void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &dout, &dx}));
  const char* op = "activation_backward";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"dout", &dout}, {"dx", &dx}});
  detail::check_float(op, {{"x", &x}, {"dout", &dout}, {"dx", &dx}});
  detail::check_same_shape(op, {"dout", &dout}, {"x", &x});
  detail::check_same_shape(op, {"dx", &dx}, {"x", &x});
  ops::activation_backward(dev, kind, x, dout, dx);
}

void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y) {
  ProfileScope prof(WorkKind::attention);
  prof.moves(detail::bytes_of({&x, &key_mask, &y}));
  const char* op = "masked_softmax";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"key_mask", &key_mask}, {"y", &y}});
  detail::check_float(op, {{"x", &x}, {"y", &y}});
  detail::check_dtype(op, {"key_mask", &key_mask}, DType::i32);
  detail::check_same_shape(op, {"y", &y}, {"x", &x});
  if (x.dim() != 3 || key_mask.dim() != 2 || key_mask.size(0) < 1 || x.size(0) % key_mask.size(0) != 0 ||
      key_mask.size(1) != x.size(2))
    throw ShapeError("masked_softmax: x " + x.to_string() + " must be (B*H, Tq, Tk) for key_mask " +
                     key_mask.to_string() + " (B, Tk)");
  if (!std::isfinite(scale))
    throw ArgumentError("masked_softmax: scale must be finite (got " + std::to_string(scale) + ")");
  ops::masked_softmax(dev, x, key_mask, scale, y);
}

}  // namespace mixtrain
