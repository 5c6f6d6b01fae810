// Checks shared by the flat optimizers.
#include "optim/optim_util.h"

#include <cstdio>

namespace mixtrain::optim_detail {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void check_store(const ParameterStore& store, int64_t flat_numel, const char* op) {
  if (!store.finalized()) throw ArgumentError(std::string(op) + ": the parameter store is not finalized");
  if (store.flat_numel() != flat_numel)
    throw ArgumentError(std::string(op) + ": the parameter store has " + std::to_string(store.flat_numel()) +
                        " flat elements, the optimizer was built for " + std::to_string(flat_numel));
  if (store.flat_params().dtype() != DType::f32)
    throw DTypeError(std::string(op) + ": parameters must be f32 (16-bit parameters need master weights), got " +
                     store.flat_params().to_string());
  if (store.flat_grads().dtype() != DType::f32)
    throw DTypeError(std::string(op) + ": gradients must be f32, got " + store.flat_grads().to_string());
}

void check_nonneg(const char* op, const char* what, double value) {
  if (!(value >= 0) || !std::isfinite(value))
    throw ArgumentError(std::string(op) + ": " + what + " must be >= 0 and finite, got " + fmt(value));
}

}  // namespace mixtrain::optim_detail
