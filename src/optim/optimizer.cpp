// The optimizer interface: kinds by name, shard ranges (the factory: optim/make_optimizer.cpp).
#include "mixtrain/optim/optimizer.h"

#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain {

OptimizerKind parse_optimizer_kind(std::string_view s) {
  if (s == "adamw") return OptimizerKind::adamw;
  if (s == "sgd") return OptimizerKind::sgd;
  throw ArgumentError("unknown optimizer '" + std::string(s) + "' (valid: adamw, sgd)");
}

std::string_view optimizer_kind_name(OptimizerKind k) { return k == OptimizerKind::adamw ? "adamw" : "sgd"; }

FlatRange FlatRange::resolved(int64_t flat_numel) const {
  if (end < 0) return {0, flat_numel};
  if (begin < 0 || begin > end || end > flat_numel)
    throw ArgumentError("optimizer shard [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") is not inside the arena of " + std::to_string(flat_numel) + " elements");
  return *this;
}

}  // namespace mixtrain
