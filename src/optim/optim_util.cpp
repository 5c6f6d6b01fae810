// Checks shared by the flat optimizers.
#include "optim/optim_util.h"

#include <cmath>
#include <cstdio>

namespace mixtrain::optim_detail {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void check_store(const ParameterStore& store, int64_t flat_numel, DType param_dtype, const char* op) {
  if (!store.finalized()) throw ArgumentError(std::string(op) + ": the parameter store is not finalized");
  if (store.flat_numel() != flat_numel)
    throw ArgumentError(std::string(op) + ": the parameter store has " + std::to_string(store.flat_numel()) +
                        " flat elements, the optimizer was built for " + std::to_string(flat_numel));
  const std::string want(dtype_name(param_dtype));
  if (store.flat_params().dtype() != param_dtype)
    throw DTypeError(std::string(op) + ": parameters must be " + want +
                     " (the dtype the optimizer was built for), got " + store.flat_params().to_string());
  if (store.flat_grads().dtype() != param_dtype)
    throw DTypeError(std::string(op) + ": gradients must be " + want + " like the parameters, got " +
                     store.flat_grads().to_string());
}

DType optimizer_param_dtype(const ParameterStore& store, const char* op) {
  const DType d = store.flat_params().dtype();
  if (d != DType::f32 && d != DType::bf16 && d != DType::f16)
    throw DTypeError(std::string(op) + ": parameters must be f32, bf16 or f16, got " +
                     store.flat_params().to_string());
  return d;
}

void check_rounding(const char* op, UpdateRounding r) {
  if (r != UpdateRounding::nearest && r != UpdateRounding::stochastic && r != UpdateRounding::kahan &&
      r != UpdateRounding::master)
    throw ArgumentError(std::string(op) + ": rounding must be nearest, stochastic, kahan or master, got " +
                        std::to_string(int(r)));
}

void check_nonneg(const char* op, const char* what, double value) {
  if (!(value >= 0) || !std::isfinite(value))
    throw ArgumentError(std::string(op) + ": " + what + " must be >= 0 and finite, got " + fmt(value));
}

Tensor shard_view(const Tensor& flat, const FlatRange& shard) {
  if (shard.begin == 0 && shard.end == flat.numel()) return flat;
  return flat.slice(0, shard.begin, shard.end);
}

Tensor shard_of(const Tensor& t, const FlatRange& shard, int64_t flat_numel) {
  if (!t.defined() || shard.size() == flat_numel || t.shape() != Shape{flat_numel}) return t;
  return t.slice(0, shard.begin, shard.end);
}

WorkingCopyOut shard_working(WorkingCopyOut w, const FlatRange& shard) {
  if (!w) return w;
  // The shard's element i is the arena's shard.begin + i: the copy starts at w.begin - shard.begin
  // in the shard's terms, or, when it starts before the shard, its element for the shard's first.
  if (w.begin >= shard.begin) {
    w.begin -= shard.begin;
  } else {
    w.data = static_cast<char*>(w.data) + static_cast<size_t>(shard.begin - w.begin) * dtype_size(w.dtype);
    w.begin = 0;
  }
  return w;
}

void check_restore_kind(const Optimizer& o, const OptimizerState& s) {
  if (s.kind != o.kind())
    throw ArgumentError("optimizer state is " + std::string(optimizer_kind_name(s.kind)) +
                        "'s, this optimizer is " + std::string(optimizer_kind_name(o.kind())));
}
void check_compensation(const Tensor& mine, const OptimizerState& s) {
  if (s.compensation.defined() != mine.defined())
    throw ArgumentError(mine.defined() ? "no Kahan compensation buffer for kahan rounding"
                                       : "unexpected compensation buffer (the update rounding is not kahan)");
}
void check_master(bool mine, const OptimizerState& s) {
  if (s.master.defined() != mine)
    throw ArgumentError(
        mine ? "no fp32 master weights for master rounding (the state was saved with another update "
               "rounding)"
             : "unexpected fp32 master weights (the update rounding is not master)");
}

}  // namespace mixtrain::optim_detail
