// Public elementwise ops (add, mul, scale, gelu): argument checks, then the device's backend.
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const Tensor&, Tensor&)> add{"add", ref::add, cpu::add, meta::add};
const Op<void(const Tensor&, const Tensor&, Tensor&)> mul{"mul", ref::mul, cpu::mul, meta::mul};
const Op<void(const Tensor&, float, Tensor&)> scale{"scale", ref::scale, cpu::scale, meta::scale};
const Op<void(const Tensor&, Tensor&)> gelu{"gelu", ref::gelu, cpu::gelu, meta::gelu};
}  // namespace ops

namespace {
using detail::Arg;

// a (..., C); b the shape of a or a row (C); out the shape of a.
Device check_binary(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Device dev = detail::check_defined_same_device(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  detail::check_float(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  const bool row = a.dim() >= 1 && b.dim() == 1 && b.size(0) == a.size(-1);
  if (!(b.shape() == a.shape()) && !row)
    throw ShapeError(std::string(op) + ": b " + b.to_string() + " is neither the shape of a " +
                     a.to_string() + " nor a row of its last dim");
  detail::check_same_shape(op, {"out", &out}, {"a", &a});
  return dev;
}

Device check_unary(const char* op, const char* in_name, const Tensor& x, const Tensor& out) {
  const Device dev = detail::check_defined_same_device(op, {{in_name, &x}, {"out", &out}});
  detail::check_float(op, {{in_name, &x}, {"out", &out}});
  detail::check_same_shape(op, {"out", &out}, {in_name, &x});
  return dev;
}
}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&a, &b, &out}));
  ops::add(check_binary("add", a, b, out), a, b, out);
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&a, &b, &out}));
  ops::mul(check_binary("mul", a, b, out), a, b, out);
}

void scale(const Tensor& a, float s, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&a, &out}));
  ops::scale(check_unary("scale", "a", a, out), a, s, out);
}

void gelu(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
  ops::gelu(check_unary("gelu", "x", x, out), x, out);
}

}  // namespace mixtrain
