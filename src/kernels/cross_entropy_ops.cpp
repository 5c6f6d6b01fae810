// Public cross-entropy from logits: argument checks (including every target against the
// vocabulary), then the device's backend.
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<double(const Tensor&, const Tensor&, Tensor*)> cross_entropy{
    "cross_entropy", ref::cross_entropy, cpu::cross_entropy, meta::cross_entropy};
}  // namespace ops

double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) {
  ProfileScope prof(WorkKind::loss);
  prof.moves(detail::bytes_of({&logits, &targets, losses}));
  const char* op = "cross_entropy";
  const Device dev = detail::check_defined_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"losses", losses ? losses : &logits}});
  detail::check_float(op, {{"logits", &logits}});
  detail::check_dtype(op, {"targets", &targets}, DType::i32);
  if (losses) detail::check_f32_or_f64(op, {"losses", losses});
  detail::check_min_dim(op, {"logits", &logits}, 1);
  if (!detail::is_per_row_shape(targets, logits))
    throw ShapeError(std::string(op) + ": targets " + targets.to_string() +
                     " must have one element per row of logits " + logits.to_string());
  if (losses && !detail::is_per_row_shape(*losses, logits))
    throw ShapeError(std::string(op) + ": losses " + losses->to_string() +
                     " must have one element per row of logits " + logits.to_string());
  const int64_t V = logits.size(-1), R = targets.numel();
  if (dev.type == DeviceType::cpu) {  // host data: check every target before any kernel
    const int32_t* t = static_cast<const int32_t*>(targets.raw_data());
    for (int64_t r = 0; r < R; ++r) {
      const int32_t v = t[ref::detail::elem_offset(targets, r)];
      if (v != -1 && (v < 0 || v >= V))
        throw ArgumentError(std::string(op) + ": target " + std::to_string(v) + " in row " +
                            std::to_string(r) + " is outside [0, " + std::to_string(V) +
                            ") (or -1 to ignore) for logits " + logits.to_string());
    }
  }
  return ops::cross_entropy(dev, logits, targets, losses);
}

}  // namespace mixtrain
