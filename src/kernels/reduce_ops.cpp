// Public reductions (reduce, reduce_last, sum_to_row): argument checks, then the device's backend.
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<double(const Tensor&, ReduceOp)> reduce{"reduce", ref::reduce, cpu::reduce, meta::reduce};
const Op<void(const Tensor&, ReduceOp, Tensor&)> reduce_last{"reduce_last", ref::reduce_last,
                                                             cpu::reduce_last, meta::reduce_last};
const Op<void(const Tensor&, Tensor&)> sum_to_row{"sum_to_row", ref::sum_to_row, cpu::sum_to_row,
                                                  meta::sum_to_row};
const Op<void(const Tensor&, Tensor&)> argmax_last{"argmax_last", ref::argmax_last, cpu::argmax_last,
                                                   meta::argmax_last};
}  // namespace ops

double reduce(const Tensor& x, ReduceOp op) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x}));
  const Device dev = detail::check_defined_same_device("reduce", {{"x", &x}});
  detail::check_float("reduce", {{"x", &x}});
  if (op == ReduceOp::max && x.numel() == 0)
    throw ArgumentError("reduce: max of an empty tensor x " + x.to_string());
  return ops::reduce(dev, x, op);
}

void reduce_last(const Tensor& x, ReduceOp op, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
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
  ops::reduce_last(dev, x, op, out);
}

void sum_to_row(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
  const char* op_name = "sum_to_row";
  const Device dev = detail::check_defined_same_device(op_name, {{"x", &x}, {"out", &out}});
  detail::check_float(op_name, {{"x", &x}, {"out", &out}});
  detail::check_min_dim(op_name, {"x", &x}, 1);
  if (out.dim() != 1 || out.size(0) != x.size(-1))
    throw ShapeError(std::string(op_name) + ": out " + out.to_string() + " must be (" +
                     std::to_string(x.size(-1)) + "), the last dim of x " + x.to_string());
  ops::sum_to_row(dev, x, out);
}

void argmax_last(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
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
  ops::argmax_last(dev, x, out);
}

}  // namespace mixtrain
