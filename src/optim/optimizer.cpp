// The optimizer interface: kinds by name, the factory, and AdamW's and SGD's checkpoint state.
#include "mixtrain/optim/optimizer.h"

#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/sgd.h"

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

std::unique_ptr<Optimizer> make_optimizer(const ParameterStore& store, const OptimizerConfig& c, FlatRange shard) {
  if (c.kind == OptimizerKind::adamw) {
    AdamWConfig a;
    a.lr = c.lr;
    a.beta1 = c.beta1;
    a.beta2 = c.beta2;
    a.eps = c.eps;
    a.weight_decay = c.weight_decay;
    a.rounding = c.rounding;
    a.seed = c.seed;
    return std::make_unique<AdamW>(store, a, shard);
  }
  SgdConfig s;
  s.lr = c.lr;
  s.momentum = c.momentum;
  s.dampening = c.dampening;
  s.nesterov = c.nesterov;
  s.weight_decay = c.weight_decay;
  s.rounding = c.rounding;
  s.seed = c.seed;
  return std::make_unique<SGD>(store, s, shard);
}

namespace {
void check_restore_kind(const Optimizer& o, const OptimizerState& s) {
  if (s.kind != o.kind())
    throw ArgumentError("optimizer state is " + std::string(optimizer_kind_name(s.kind)) + "'s, this optimizer is " +
                        std::string(optimizer_kind_name(o.kind())));
}
void check_compensation(const Tensor& mine, const OptimizerState& s) {
  if (s.compensation.defined() != mine.defined())
    throw ArgumentError(mine.defined() ? "no Kahan compensation buffer for kahan rounding"
                                       : "unexpected compensation buffer (the update rounding is not kahan)");
}
void check_master(bool mine, const OptimizerState& s) {
  if (s.master.defined() != mine)
    throw ArgumentError(mine ? "no fp32 master weights for master rounding (the state was saved with another update "
                               "rounding)"
                             : "unexpected fp32 master weights (the update rounding is not master)");
}
}  // namespace

OptimizerState AdamW::state() const {
  OptimizerState s;
  s.kind = OptimizerKind::adamw;
  s.steps = steps_;
  s.exp_avg = m_;
  s.exp_avg_sq = v_;
  s.compensation = c_;
  s.master = master_.tensor();
  return s;
}

void AdamW::restore(const OptimizerState& s) {
  check_restore_kind(*this, s);
  check_compensation(c_, s);
  check_master(master_.defined(), s);
  set_state(s.steps, s.exp_avg, s.exp_avg_sq, s.compensation, s.master);
}

OptimizerState SGD::state() const {
  OptimizerState s;
  s.kind = OptimizerKind::sgd;
  s.steps = steps_;
  s.momentum_buffer = buf_;
  s.compensation = c_;
  s.master = master_.tensor();
  return s;
}

void SGD::restore(const OptimizerState& s) {
  check_restore_kind(*this, s);
  if (s.momentum_buffer.defined() != buf_.defined())
    throw ArgumentError(buf_.defined() ? "no momentum buffer for momentum " + std::to_string(config_.momentum)
                                       : std::string("a momentum buffer, but momentum is 0"));
  check_compensation(c_, s);
  check_master(master_.defined(), s);
  set_state(s.steps, s.momentum_buffer, s.compensation, s.master);
}

}  // namespace mixtrain
