// The training engine's loop (train/training_run.h): steps, evaluation, the summary.
#include "mixtrain/train/training_run.h"

#include <algorithm>
#include <chrono>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/memory.h"
#include "tensor/alloc_site.h"

namespace mixtrain {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void RunConfig::validate() const {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) throw ArgumentError(std::string(what) + " must be positive, got " + std::to_string(v));
  };
  positive(steps, "steps");
  positive(grad_accum, "grad_accum");
  if (eval_batches < 0) throw ArgumentError("eval_batches must be >= 0 (0: all), got " + std::to_string(eval_batches));
  positive(max_bad_steps, "max_bad_steps");
  if (eval_every < 0) throw ArgumentError("eval_every must be >= 0, got " + std::to_string(eval_every));
  if (!(grad_clip >= 0)) throw ArgumentError("grad_clip must be >= 0 (0 disables clipping)");
  mixtrain::validate(schedule);
}

StepBreakdown TrainSummary::breakdown_per_step() const {
  StepBreakdown s;
  if (profiled_steps <= 0) return s;
  double known = 0;
  const double n = static_cast<double>(profiled_steps);
  for (size_t k = 0; k < kNumWorkKinds; ++k) {
    s.work[k] = breakdown[k] / n;
    known += breakdown[k];
  }
  s.other = (profiled_seconds - known) / n;
  s.step = profiled_seconds / n;
  return s;
}

double TrainSummary::system_allocations_per_step() const {
  if (profiled_steps <= 0) return 0;
  return static_cast<double>(profiled_system_allocations) / static_cast<double>(profiled_steps);
}

DivergedError::DivergedError(int64_t s, double loss, int64_t bad, TrainSummary sum)
    : Error({"lr", "grad_clip"},
            "training diverged: loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                std::to_string(s) + (bad > 1 ? " (" + std::to_string(bad) + " non-finite steps in a row)" : "") +
                "; lower lr, enable grad_clip, or use a loss scale"),
      step(s),
      summary(std::move(sum)) {}

TrainingRun::TrainingRun(Model& model, Optimizer& optimizer, MixedPrecision& mp, const DataSource& data,
                         RunConfig config)
    : model_(model), optimizer_(optimizer), mp_(mp), data_(data), config_(std::move(config)) {
  config_.validate();
  summary_.precision = std::string(mp.spec().name);
  summary_.parameters = model.num_parameters();
}

void TrainingRun::set_start_step(int64_t step) {
  if (step < 0 || step > config_.steps)
    throw ArgumentError("start step " + std::to_string(step) + " is outside [0, " + std::to_string(config_.steps) + "]");
  step_ = start_step_ = step;
  summary_.steps = step;
}

int64_t TrainingRun::tokens_per_step() const {
  return data_.batch_size() * data_.sequence_length() * config_.grad_accum;
}

TrainingRun::Evaluation TrainingRun::evaluate() {
  const ScopedPhase phase(step_, "evaluation");
  const EvalSums sums = mp_.forward([&] {
    autograd::NoGradGuard no_grad;
    const int64_t available = data_.num_eval_batches();
    const int64_t n = config_.eval_batches == 0 ? available : std::min(config_.eval_batches, available);
    Batch batch;
    EvalSums total;
    for (int64_t i = 0; i < n; ++i) {
      data_.eval_batch(n == available ? i : i * available / n, batch);  // spread evenly
      total.add(model_.evaluate_batch(batch));
    }
    return total;
  });
  Evaluation e;
  if (sums.rows > 0) e.loss = sums.loss_sum / static_cast<double>(sums.rows);
  if (sums.scored > 0) e.accuracy = static_cast<double>(sums.correct) / static_cast<double>(sums.scored);
  return e;
}

StepRecord TrainingRun::step() {
  StepRecord r;
  r.step = step_ + 1;
  for (auto& h : hooks_) h->on_step_begin(*this, r.step);
  const double t0 = now_s();
  r.lr = lr_at(r.step, config_.schedule);
  ParameterStore& params = model_.params();
  params.zero_grads();
  // Micro-batches: each loss is divided by K and multiplied by the (constant) loss scale before
  // backward, so the gradients sum to the scaled mean over the effective batch.
  const int64_t K = config_.grad_accum;
  double loss = 0;
  for (int64_t micro = 0; micro < K; ++micro) {
    const int64_t position = (r.step - 1) * K + micro + 1;  // data and dropout stream position
    const ScopedPhase phase(r.step, "forward");
    data_.train_batch(position, batch_);
    // Padding is not work done: a classification batch says how many tokens are real.
    r.tokens += batch_.real_tokens > 0 ? batch_.real_tokens : batch_.inputs.numel();
    ModelOutput out = mp_.forward(
        [&] { return model_.forward_batch(batch_, true, config_.seed ^ (static_cast<uint64_t>(position) << 20)); });
    const double l = out.loss.value().item();
    loss += l / static_cast<double>(K);
    if (!std::isfinite(l)) {
      r.loss_finite = false;
      break;  // nothing to learn from this step: it is skipped below
    }
    mp_.backward(out.loss, K);
  }
  r.loss = loss;
  r.loss_scale = mp_.scaler().scale();
  r.found_inf = true;
  if (r.loss_finite) {
    for (auto& h : hooks_) h->after_backward(*this, r.step);
    const ScopedPhase phase(r.step, "optimizer update");
    const StepResult s = mp_.prepare_step(params, config_.grad_clip);
    r.found_inf = s.found_inf;
    r.grad_norm = s.grad_norm;
    r.loss_scale = s.loss_scale;
    if (!s.found_inf) mp_.apply_step(optimizer_, params, r.lr);
  }
  mp_.scaler().update(r.found_inf);
  r.skipped = r.found_inf;
  if (r.skipped) ++summary_.skipped_steps;
  if (r.found_inf && r.loss_finite) ++summary_.overflows;
  if (mp_.scaler().hit_min_scale()) summary_.hit_min_scale = true;
  r.seconds = now_s() - t0;
  train_time_ += r.seconds;
  step_ = r.step;
  for (auto& h : hooks_) h->after_update(*this, r);
  train_tokens_ += r.tokens;
  r.tokens_per_s = static_cast<double>(r.tokens) / r.seconds;
  r.elapsed_s = now_s() - run_start_;
  summary_.steps = r.step;
  summary_.final_loss_scale = mp_.scaler().scale();
  bad_in_a_row_ = r.loss_finite ? 0 : bad_in_a_row_ + 1;
  r.diverged = bad_in_a_row_ >= config_.max_bad_steps;
  return r;
}

void TrainingRun::finish_summary() {
  summary_.elapsed_s = now_s() - run_start_;
  summary_.tokens_per_s = train_time_ > 0 ? static_cast<double>(train_tokens_) / train_time_ : 0.0;
  summary_.model_flops_per_s = model_.flops_per_token(data_.sequence_length()) * summary_.tokens_per_s;
}

TrainSummary TrainingRun::run() {
  run_start_ = now_s();
  train_time_ = 0;
  train_tokens_ = 0;
  summary_.unigram_baseline = data_.baseline_loss();
  for (auto& h : hooks_) h->on_run_start(*this);
  while (step_ < config_.steps) {
    StepRecord r = step();
    if (r.diverged) {
      for (auto& h : hooks_) h->on_step_end(*this, r);
      summary_.diverged = true;
      summary_.final_train_loss = r.loss;
      summary_.val_loss = summary_.val_accuracy = NAN;
      finish_summary();
      throw DivergedError(r.step, r.loss, bad_in_a_row_, summary_);
    }
    if (r.step == config_.steps || (config_.eval_every > 0 && r.step % config_.eval_every == 0)) {
      const Evaluation e = evaluate();
      r.val_loss = e.loss;
      r.val_accuracy = e.accuracy;
      r.evaluated = true;
      if (r.step == config_.steps) {
        summary_.val_loss = r.val_loss;
        summary_.val_accuracy = r.val_accuracy;
      }
    }
    for (auto& h : hooks_) h->on_step_end(*this, r);
    summary_.final_train_loss = r.loss;
    bool stop = false;
    for (auto& h : hooks_) stop = h->should_stop(*this, r) || stop;  // every hook sees every step
    if (stop) break;
  }
  if (start_step_ == config_.steps) {  // resumed from the final step
    const Evaluation e = evaluate();
    summary_.val_loss = e.loss;
    summary_.val_accuracy = e.accuracy;
  } else if (summary_.steps < config_.steps) {  // stopped early
    summary_.val_loss = summary_.val_accuracy = NAN;
  }
  finish_summary();
  for (auto& h : hooks_) h->on_run_end(*this, summary_);
  return summary_;
}

}  // namespace mixtrain
