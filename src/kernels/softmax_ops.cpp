// Public softmax over the last dim: argument checks, then the device's backend.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, Tensor&)> softmax_last{"softmax_last", ref::softmax_last, cpu::softmax_last,
                                                    meta::softmax_last};
}  // namespace ops

void softmax_last(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::attention);
  prof.moves(detail::bytes_of({&x, &out}));
  const char* op = "softmax_last";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"out", &out}});
  detail::check_float(op, {{"x", &x}, {"out", &out}});
  detail::check_min_dim(op, {"x", &x}, 1);
  detail::check_same_shape(op, {"out", &out}, {"x", &x});
  ops::softmax_last(dev, x, out);
}

}  // namespace mixtrain
