// SGD with momentum: config checks and the class, which runs the update through the backend
// (ops::sgd_update, kernels/optimizer_ops.h; the kernels are src/kernels/cpu/sgd_cpu.cpp).
#include "mixtrain/optim/sgd.h"

#include <cmath>
#include <string>

#include "kernels/optimizer_ops.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/core/profiler.h"
#include "optim/flat_spans.h"
#include "optim/lowp.h"
#include "optim/moment_state.h"
#include "optim/optim_util.h"
#include "optim/working_copy.h"
#include "tensor/alloc_site.h"

namespace mixtrain {

void validate(const SgdConfig& c) {
  optim_detail::check_nonneg("SGD", "lr", c.lr);
  optim_detail::check_nonneg("SGD", "momentum", c.momentum);
  optim_detail::check_nonneg("SGD", "dampening", c.dampening);
  optim_detail::check_nonneg("SGD", "weight_decay", c.weight_decay);
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    throw ArgumentError("SGD: nesterov needs momentum > 0 and dampening == 0, got momentum " +
                        optim_detail::fmt(c.momentum) + ", dampening " + optim_detail::fmt(c.dampening));
  optim_detail::check_rounding("SGD", c.rounding);
}

SGD::SGD(const ParameterStore& store, SgdConfig config, FlatRange shard) : config_(config) {
  validate(config_);
  if (!store.finalized()) throw ArgumentError("SGD: the parameter store is not finalized");
  dtype_ = optim_detail::optimizer_param_dtype(store, "SGD");
  flat_numel_ = store.flat_numel();
  shard_ = shard.resolved(flat_numel_);
  optim_detail::check_state_precision(config_.state, dtype_, config_.rounding, "SGD");
  whole_ = flat_spans(store);
  spans_ = shard_spans(whole_, shard_.begin, shard_.end);
  state_spans_ = state_spans(whole_, shard_.begin, shard_.end, config_.state);
  if (MasterCopy::wanted(dtype_, config_.rounding)) master_ = MasterCopy(shard_.size());
  const ScopedOp site("SGD state");  // names the state in memory reports
  if (config_.momentum != 0.f) {
    if (config_.state == StatePrecision::fp32) {
      buf_ = Tensor::zeros({shard_.size()}, state_dtype(), MemCategory::optimizer_state);
    } else {
      optim_detail::Moment b = optim_detail::Moment::zeros(config_.state, state_spans_, shard_.size());
      buf_ = b.values, bq_ = b.parts;
    }
  }
  if (dtype_ != DType::f32 && config_.rounding == UpdateRounding::kahan)
    c_ = Tensor::zeros({shard_.size()}, dtype_, MemCategory::optimizer_state);
}

DType SGD::state_dtype() const {
  if (config_.state == StatePrecision::bf16) return DType::bf16;
  if (config_.state == StatePrecision::int8) return DType::i8;
  return master_.defined() ? DType::f32 : dtype_;
}

void SGD::step(ParameterStore& store, float lr, Tensor* working) {
  ProfileScope prof(WorkKind::optimizer);
  optim_detail::check_nonneg("SGD::step", "lr", lr);
  optim_detail::check_store(store, flat_numel_, dtype_, "SGD::step");
  const WorkingCopyOut w = working_copy_out(working, flat_numel_, "SGD::step");
  if (w && dtype_ != DType::f32) throw ArgumentError("SGD::step: a working copy is for fp32 master weights");
  SgdScalars s;
  s.neg_lr = -lr;
  s.weight_decay = config_.weight_decay;
  s.momentum = config_.momentum;
  s.one_minus_damp = float(1.0 - double(config_.dampening));
  s.first_step = steps_ == 0;
  s.nesterov = config_.nesterov;
  const LowpWrite lw{config_.rounding, config_.seed,
                     uint64_t(steps_) * uint64_t(flat_numel_) + uint64_t(shard_.begin)};
  Tensor p = optim_detail::shard_view(store.flat_params(), shard_);
  const Tensor g = optim_detail::shard_view(store.flat_grads(), shard_);
  // What the update must move: the gradient read, the state (and the master) read and written,
  // the parameters written (and read, without a master), the working copy written.
  prof.moves(int64_t(g.nbytes()) + 2 * state_bytes() + int64_t(p.nbytes()) * (master_.defined() ? 1 : 2) +
             (w ? shard_.size() * int64_t(dtype_size(w.dtype)) : 0));
  if (config_.state != StatePrecision::fp32) {  // bf16 / int8 momentum (kernels/state_kernels.h)
    if (!p.is_meta()) {
      optim_detail::Moment b{config_.state, buf_, bq_};
      const MomentBuf bb = buf_.defined() ? b.buf(true, state_seed(config_.seed, 0)) : MomentBuf{};
      float* pf = master_.defined() ? master_.for_step(p).data<float>() : p.data<float>();
      const WorkingCopyOut wc = master_.defined() ? WorkingCopyOut{p.raw_data(), dtype_, 0}
                                                  : optim_detail::shard_working(w, shard_);
      optim_detail::with_typed_grads(g, [&](const auto* gp) {
        if (force_reference())
          sgd_update_state_ref(pf, gp, bb, state_spans_, s, lw.counter_base, wc);
        else
          sgd_update_state(pf, gp, bb, state_spans_, s, lw.counter_base, wc);
      });
    }
  } else if (master_.defined()) {  // the fp32 update of the master, the 16-bit parameters rounded from it
    ops::sgd_update(p.device(), master_.for_step(p), g, buf_, c_, spans_, s, lw, {p.raw_data(), dtype_});
  } else {
    ops::sgd_update(p.device(), p, g, buf_, c_, spans_, s, lw, optim_detail::shard_working(w, shard_));
  }
  store.flat_params().storage()->bump_version();  // cached casts of the old weights are stale now
  ++steps_;
}

int64_t SGD::state_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t : {&buf_, &c_, &master_.tensor(), &bq_.absmax, &bq_.fallback})
    if (t->defined()) bytes += int64_t(t->nbytes());
  return bytes;
}

void SGD::set_state(int64_t steps, const Tensor& momentum_buffer_in, const Tensor& compensation_in,
                    const Tensor& master_in) {
  if (steps < 0) throw ArgumentError("SGD::set_state: steps must be >= 0, got " + std::to_string(steps));
  const Tensor momentum_buffer = optim_detail::shard_of(momentum_buffer_in, shard_, flat_numel_);
  const Tensor compensation = optim_detail::shard_of(compensation_in, shard_, flat_numel_);
  const Tensor master = optim_detail::shard_of(master_in, shard_, flat_numel_);
  const int64_t n = shard_.size();
  check_master_shape(master_, master, n, "SGD::set_state");
  if (buf_.defined() && (!momentum_buffer.defined() || momentum_buffer.shape() != Shape{n}))
    throw ShapeError(
        "SGD::set_state: momentum_buffer must have shape (" + std::to_string(n) + "), got " +
        (momentum_buffer.defined() ? momentum_buffer.to_string() : std::string("an undefined tensor")));
  if (c_.defined() && compensation.defined() && compensation.shape() != Shape{n})
    throw ShapeError("SGD::set_state: compensation must have shape (" + std::to_string(n) + "), got " +
                     compensation.to_string());
  if (buf_.defined()) buf_.copy_from(momentum_buffer);
  if (c_.defined()) {
    if (compensation.defined())
      c_.copy_from(compensation);
    else
      c_.zero();
  }
  if (master_.defined()) master_.set(master);
  steps_ = steps;
}

OptimizerState SGD::state() const {
  OptimizerState s;
  s.kind = OptimizerKind::sgd;
  s.steps = steps_;
  s.state_precision = config_.state;
  s.momentum_buffer = buf_;
  s.momentum_q = bq_;
  s.compensation = c_;
  s.master = master_.tensor();
  return s;
}

void SGD::restore(const OptimizerState& s) {
  optim_detail::check_restore_kind(*this, s);
  if (s.momentum_buffer.defined() != buf_.defined())
    throw ArgumentError(buf_.defined() ? "no momentum buffer for momentum " + std::to_string(config_.momentum)
                                       : std::string("a momentum buffer, but momentum is 0"));
  optim_detail::check_state_precision_match(config_.state, s);
  optim_detail::check_compensation(c_, s);
  optim_detail::check_master(master_.defined(), s);
  if (config_.state != StatePrecision::int8 || !buf_.defined())
    return set_state(s.steps, s.momentum_buffer, s.compensation, s.master);
  if (s.steps < 0) throw ArgumentError("SGD::restore: steps must be >= 0, got " + std::to_string(s.steps));
  optim_detail::Moment b{config_.state, buf_, bq_};
  b.restore(s.momentum_buffer, s.momentum_q, whole_, shard_.begin, shard_.end, flat_numel_,
            "SGD momentum_buffer");
  if (master_.defined()) {
    const Tensor mm = optim_detail::shard_of(s.master, shard_, flat_numel_);
    check_master_shape(master_, mm, shard_.size(), "SGD::restore");
    master_.set(mm);
  }
  steps_ = s.steps;
}

}  // namespace mixtrain
