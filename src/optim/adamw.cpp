// AdamW: config checks, the per-step scalars, and the class, which runs the update through the
// backend (ops::adamw_update, kernels/optimizer_ops.h; the kernels are src/kernels/cpu/adamw_cpu.cpp).
#include "mixtrain/optim/adamw.h"

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

using optim_detail::fmt;

void validate(const AdamWConfig& c) {
  optim_detail::check_nonneg("AdamW", "lr", c.lr);
  if (!(c.beta1 >= 0.f && c.beta1 < 1.f))
    throw ArgumentError("AdamW: beta1 must be in [0, 1), got " + fmt(c.beta1));
  if (!(c.beta2 >= 0.f && c.beta2 < 1.f))
    throw ArgumentError("AdamW: beta2 must be in [0, 1), got " + fmt(c.beta2));
  if (!(c.eps > 0.f) || !std::isfinite(c.eps))
    throw ArgumentError("AdamW: eps must be > 0 and finite, got " + fmt(c.eps));
  optim_detail::check_nonneg("AdamW", "weight_decay", c.weight_decay);
  optim_detail::check_rounding("AdamW", c.rounding);
}

AdamWScalars adamw_scalars(const AdamWConfig& c, float lr, int64_t step) {
  // Python floats are doubles: torch forms these in double and each becomes an fp32 scalar
  // when it meets an fp32 tensor.
  const double lr_d = lr, b1 = c.beta1, b2 = c.beta2;
  const double bc1 = 1.0 - std::pow(b1, double(step));
  const double bc2 = 1.0 - std::pow(b2, double(step));
  AdamWScalars s;
  s.decay_factor = float(1.0 - lr_d * double(c.weight_decay));
  s.beta1_weight = float(1.0 - b1);
  s.beta2 = c.beta2;
  s.one_minus_beta2 = float(1.0 - b2);
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.eps = c.eps;
  s.neg_step_size = float(-(lr_d / bc1));
  return s;
}

AdamW::AdamW(const ParameterStore& store, AdamWConfig config, FlatRange shard) : config_(config) {
  validate(config_);
  if (!store.finalized()) throw ArgumentError("AdamW: the parameter store is not finalized");
  dtype_ = optim_detail::optimizer_param_dtype(store, "AdamW");
  flat_numel_ = store.flat_numel();
  shard_ = shard.resolved(flat_numel_);
  optim_detail::check_state_precision(config_.state, dtype_, config_.rounding, "AdamW");
  whole_ = flat_spans(store);
  spans_ = shard_spans(whole_, shard_.begin, shard_.end);
  state_spans_ = state_spans(whole_, shard_.begin, shard_.end, config_.state);
  if (MasterCopy::wanted(dtype_, config_.rounding)) master_ = MasterCopy(shard_.size());
  const ScopedOp site("AdamW moments");  // names the state in memory reports
  if (config_.state == StatePrecision::fp32) {
    m_ = Tensor::zeros({shard_.size()}, state_dtype(), MemCategory::optimizer_state);
    v_ = Tensor::zeros({shard_.size()}, state_dtype(), MemCategory::optimizer_state);
  } else {
    optim_detail::Moment m = optim_detail::Moment::zeros(config_.state, state_spans_, shard_.size());
    optim_detail::Moment v = optim_detail::Moment::zeros(config_.state, state_spans_, shard_.size());
    m_ = m.values, mq_ = m.parts, v_ = v.values, vq_ = v.parts;
  }
  if (dtype_ != DType::f32 && config_.rounding == UpdateRounding::kahan)
    c_ = Tensor::zeros({shard_.size()}, dtype_, MemCategory::optimizer_state);
}

DType AdamW::state_dtype() const {
  if (config_.state == StatePrecision::bf16) return DType::bf16;
  if (config_.state == StatePrecision::int8) return DType::i8;
  return master_.defined() ? DType::f32 : dtype_;
}

void AdamW::step(ParameterStore& store, float lr, Tensor* working) {
  ProfileScope prof(WorkKind::optimizer);
  optim_detail::check_nonneg("AdamW::step", "lr", lr);
  optim_detail::check_store(store, flat_numel_, dtype_, "AdamW::step");
  const WorkingCopyOut w = working_copy_out(working, flat_numel_, "AdamW::step");
  if (w && dtype_ != DType::f32)
    throw ArgumentError("AdamW::step: a working copy is for fp32 master weights");
  const int64_t t = steps_ + 1;
  const AdamWScalars s = adamw_scalars(config_, lr, t);
  // A shard's element i is the arena's shard.begin + i: the same stochastic-rounding draw.
  const LowpWrite lw{config_.rounding, config_.seed,
                     uint64_t(steps_) * uint64_t(flat_numel_) + uint64_t(shard_.begin)};
  Tensor p = optim_detail::shard_view(store.flat_params(), shard_);
  const Tensor g = optim_detail::shard_view(store.flat_grads(), shard_);
  // What the update must move: the gradient read, the state (and the master) read and written,
  // the parameters written (and read, without a master), the working copy written.
  prof.moves(int64_t(g.nbytes()) + 2 * state_bytes() + int64_t(p.nbytes()) * (master_.defined() ? 1 : 2) +
             (w ? shard_.size() * int64_t(dtype_size(w.dtype)) : 0));
  if (config_.state != StatePrecision::fp32) {  // bf16 / int8 moments (kernels/state_kernels.h)
    if (!p.is_meta()) {
      optim_detail::Moment m{config_.state, m_, mq_}, v{config_.state, v_, vq_};
      const MomentBuf mb = m.buf(true, state_seed(config_.seed, 0)),
                      vb = v.buf(false, state_seed(config_.seed, 1));
      // Master rounding: the fp32 masters updated from the 16-bit gradients, the parameters
      // rounded from them (as the fp32-state master kernels do).
      float* pf = master_.defined() ? master_.for_step(p).data<float>() : p.data<float>();
      const WorkingCopyOut wc = master_.defined() ? WorkingCopyOut{p.raw_data(), dtype_, 0}
                                                  : optim_detail::shard_working(w, shard_);
      optim_detail::with_typed_grads(g, [&](const auto* gp) {
        if (force_reference())
          adamw_update_state_ref(pf, gp, mb, vb, state_spans_, s, lw.counter_base, wc);
        else
          adamw_update_state(pf, gp, mb, vb, state_spans_, s, lw.counter_base, wc);
      });
    }
  } else if (master_.defined()) {  // the fp32 update of the master, the 16-bit parameters rounded from it
    ops::adamw_update(p.device(), master_.for_step(p), g, m_, v_, c_, spans_, s, lw, {p.raw_data(), dtype_});
  } else {
    ops::adamw_update(p.device(), p, g, m_, v_, c_, spans_, s, lw, optim_detail::shard_working(w, shard_));
  }
  store.flat_params().storage()->bump_version();  // cached casts of the old weights are stale now
  steps_ = t;
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t :
       {&m_, &v_, &c_, &master_.tensor(), &mq_.absmax, &mq_.fallback, &vq_.absmax, &vq_.fallback})
    if (t->defined()) bytes += int64_t(t->nbytes());
  return bytes;
}

void AdamW::set_state(int64_t steps, const Tensor& exp_avg_in, const Tensor& exp_avg_sq_in,
                      const Tensor& compensation_in, const Tensor& master_in) {
  if (steps < 0) throw ArgumentError("AdamW::set_state: steps must be >= 0, got " + std::to_string(steps));
  const Tensor exp_avg = optim_detail::shard_of(exp_avg_in, shard_, flat_numel_);
  const Tensor exp_avg_sq = optim_detail::shard_of(exp_avg_sq_in, shard_, flat_numel_);
  const Tensor compensation = optim_detail::shard_of(compensation_in, shard_, flat_numel_);
  const Tensor master = optim_detail::shard_of(master_in, shard_, flat_numel_);
  const int64_t n = shard_.size();
  check_master_shape(master_, master, n, "AdamW::set_state");
  for (const Tensor* t : {&exp_avg, &exp_avg_sq})
    if (!t->defined() || t->shape() != Shape{n})
      throw ShapeError("AdamW::set_state: moments must have shape (" + std::to_string(n) + "), got " +
                       (t->defined() ? t->to_string() : std::string("an undefined tensor")));
  if (c_.defined() && compensation.defined() && compensation.shape() != Shape{n})
    throw ShapeError("AdamW::set_state: compensation must have shape (" + std::to_string(n) + "), got " +
                     compensation.to_string());
  m_.copy_from(exp_avg);
  v_.copy_from(exp_avg_sq);
  if (c_.defined()) {
    if (compensation.defined())
      c_.copy_from(compensation);
    else
      c_.zero();
  }
  if (master_.defined()) master_.set(master);
  steps_ = steps;
}

OptimizerState AdamW::state() const {
  OptimizerState s;
  s.kind = OptimizerKind::adamw;
  s.steps = steps_;
  s.state_precision = config_.state;
  s.exp_avg = m_;
  s.exp_avg_sq = v_;
  s.exp_avg_q = mq_;
  s.exp_avg_sq_q = vq_;
  s.compensation = c_;
  s.master = master_.tensor();
  return s;
}

void AdamW::restore(const OptimizerState& s) {
  optim_detail::check_restore_kind(*this, s);
  optim_detail::check_state_precision_match(config_.state, s);
  optim_detail::check_compensation(c_, s);
  optim_detail::check_master(master_.defined(), s);
  if (config_.state != StatePrecision::int8)
    return set_state(s.steps, s.exp_avg, s.exp_avg_sq, s.compensation, s.master);
  if (s.steps < 0) throw ArgumentError("AdamW::restore: steps must be >= 0, got " + std::to_string(s.steps));
  optim_detail::Moment m{config_.state, m_, mq_}, v{config_.state, v_, vq_};
  m.restore(s.exp_avg, s.exp_avg_q, whole_, shard_.begin, shard_.end, flat_numel_, "AdamW exp_avg");
  v.restore(s.exp_avg_sq, s.exp_avg_sq_q, whole_, shard_.begin, shard_.end, flat_numel_, "AdamW exp_avg_sq");
  if (master_.defined()) {
    const Tensor mm = optim_detail::shard_of(s.master, shard_, flat_numel_);
    check_master_shape(master_, mm, shard_.size(), "AdamW::restore");
    master_.set(mm);
  }
  steps_ = s.steps;
}

}  // namespace mixtrain
