// Public reductions (reduce, reduce_last, sum_to_row): argument checks, then the device's backend.
#include <string>

#include "kernels/backend.h"
#include "kernels/op_checks.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {

double reduce(const Tensor& x, ReduceOp op) {
  ProfileScope prof(WorkKind::elementwise);
  const Device dev = detail::check_defined_same_device("reduce", {{"x", &x}});
  detail::check_float("reduce", {{"x", &x}});
  if (op == ReduceOp::max && x.numel() == 0)
    throw ArgumentError("reduce: max of an empty tensor x " + x.to_string());
  return backend_for(dev).reduce(x, op);
}

void reduce_last(const Tensor& x, ReduceOp op, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  const char* op_name = "reduce_last";
  const Device dev = detail::check_defined_same_device(op_name, {{"x", &x}, {"out", &out}});
  detail::check_float(op_name, {{"x", &x}, {"out", &out}});
  if (out.dtype() != DType::f32 && out.dtype() != x.dtype())
    throw DTypeError(std::string(op_name) + ": out " + out.to_string() + " must be f32 or the dtype of x " +
                     x.to_string());
  detail::check_min_dim(op_name, {"x", &x}, 1);
  if (!(out.shape() == detail::leading_shape(x)))
    throw ShapeError(std::string(op_name) + ": out " + out.to_string() + " must have the leading shape " +
                     detail::leading_shape(x).to_string() + " of x " + x.to_string());
  if (op == ReduceOp::max && x.size(-1) == 0 && out.numel() > 0)
    throw ArgumentError(std::string(op_name) + ": max over an empty last dim of x " + x.to_string());
  backend_for(dev).reduce_last(x, op, out);
}

void sum_to_row(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  const char* op_name = "sum_to_row";
  const Device dev = detail::check_defined_same_device(op_name, {{"x", &x}, {"out", &out}});
  detail::check_float(op_name, {{"x", &x}, {"out", &out}});
  detail::check_min_dim(op_name, {"x", &x}, 1);
  if (out.dim() != 1 || out.size(0) != x.size(-1))
    throw ShapeError(std::string(op_name) + ": out " + out.to_string() + " must be (" +
                     std::to_string(x.size(-1)) + "), the last dim of x " + x.to_string());
  backend_for(dev).sum_to_row(x, out);
}

void argmax_last(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  const char* op_name = "argmax_last";
  const Device dev = detail::check_defined_same_device(op_name, {{"x", &x}, {"out", &out}});
  detail::check_float(op_name, {{"x", &x}});
  out.check_dtype(DType::i32, "argmax_last: out");
  detail::check_min_dim(op_name, {"x", &x}, 1);
  if (!(out.shape() == detail::leading_shape(x)))
    throw ShapeError(std::string(op_name) + ": out " + out.to_string() + " must have the leading shape " +
                     detail::leading_shape(x).to_string() + " of x " + x.to_string());
  if (x.size(-1) == 0 && out.numel() > 0)
    throw ArgumentError(std::string(op_name) + ": argmax over an empty last dim of x " + x.to_string());
  backend_for(dev).argmax_last(x, out);
}

}  // namespace mixtrain
