// The training engine's loop (train/training_run.h): steps, evaluation, the summary.
#include "mixtrain/train/training_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <span>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/optim/zero.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/memory.h"
#include "tensor/alloc_site.h"

namespace mixtrain {
namespace {
// Sets a flag for a scope and clears it however the scope ends (a hook may throw).
struct FlagScope {
  bool& flag;
  explicit FlagScope(bool& f) : flag(f) { flag = true; }
  ~FlagScope() { flag = false; }
};
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
  if (eval_batches < 0)
    throw ArgumentError("eval_batches must be >= 0 (0: all), got " + std::to_string(eval_batches));
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

DivergedError::DivergedError(int64_t s, double loss, int64_t bad, TrainSummary sum, const std::string& site)
    : Error({"lr", "grad_clip"},
            "training diverged: loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                std::to_string(s) +
                (bad > 1 ? " (" + std::to_string(bad) + " non-finite steps in a row)" : "") +
                (site.empty() ? "" : " (first non-finite value at " + site + ")") +
                "; lower lr, enable grad_clip, or use a loss scale"),
      step(s),
      summary(std::move(sum)) {}

DivergedError::DivergedError(int64_t s, const std::string& message, TrainSummary sum)
    : Error({"keep_fp32", "lr"}, "training stopped: " + message), step(s), summary(std::move(sum)) {}

TrainingRun::TrainingRun(Model& model, Optimizer& optimizer, MixedPrecision& mp, const DataSource& data,
                         RunConfig config)
    : model_(model), optimizer_(optimizer), mp_(mp), data_(data), config_(std::move(config)) {
  config_.validate();
  zero_ = dynamic_cast<const ZeroOptimizer*>(&optimizer);
  if (zero_ != nullptr && zero_->partition().ranks() != world_size())
    throw ArgumentError("a ZeroOptimizer over " + std::to_string(zero_->partition().ranks()) +
                        " ranks in a run of " + std::to_string(world_size()));
  summary_.precision = std::string(mp.spec().name);
  const MatmulPrecision matmul = float32_matmul_precision();
  summary_.matmul_precision = std::string(matmul_precision_name(matmul));
  summary_.gemm["f32"] = matmul_precision_route(matmul);
  if (mp.spec().compute_dtype != DType::f32)
    summary_.gemm[std::string(dtype_name(mp.spec().compute_dtype))] = gemm_impl_name(mp.spec().compute_dtype);
  summary_.parameters = model.num_parameters();
}

void TrainingRun::sum_over_ranks(EvalSums& s) {
  double v[4] = {s.loss_sum, static_cast<double>(s.rows), static_cast<double>(s.correct),
                 static_cast<double>(s.scored)};
  config_.world->sum(v);
  s.loss_sum = v[0];
  s.rows = static_cast<int64_t>(v[1]);
  s.correct = static_cast<int64_t>(v[2]);
  s.scored = static_cast<int64_t>(v[3]);
}

void TrainingRun::set_start_step(int64_t step) {
  if (step < 0 || step > config_.steps)
    throw ArgumentError("start step " + std::to_string(step) + " is outside [0, " +
                        std::to_string(config_.steps) + "]");
  step_ = start_step_ = step;
  summary_.steps = step;
}

int64_t TrainingRun::tokens_per_step() const {
  return data_.batch_size() * data_.sequence_length() * config_.grad_accum * world_size();
}

TrainingRun::Evaluation TrainingRun::evaluate() {
  const ScopedPhase phase(step_, "evaluation");
  EvalSums sums = mp_.forward([&] {
    autograd::NoGradGuard no_grad;
    const int64_t available = data_.num_eval_batches();
    const int64_t n = config_.eval_batches == 0 ? available : std::min(config_.eval_batches, available);
    Batch batch;
    EvalSums total;
    for (int64_t i = rank(); i < n; i += world_size()) {                // rank r: batches r, r + N, ...
      data_.eval_batch(n == available ? i : i * available / n, batch);  // spread evenly
      total.add(model_.evaluate_batch(batch));
    }
    // Lockstep: as many passes as rank 0 (which has the most), the extra one's sums dropped.
    if (config_.lockstep_passes && n > 0 && rank() >= n % world_size() && n % world_size() != 0) {
      data_.eval_batch(0, batch);
      (void)model_.evaluate_batch(batch);
    }
    return total;
  });
  if (world_size() > 1) sum_over_ranks(sums);
  Evaluation e;
  if (sums.rows > 0) e.loss = sums.loss_sum / static_cast<double>(sums.rows);
  if (sums.scored > 0) e.accuracy = static_cast<double>(sums.correct) / static_cast<double>(sums.scored);
  // The arg max of non-finite logits is no prediction: a non-finite loss has no accuracy.
  if (!std::isfinite(e.loss)) e.accuracy = NAN;
  return e;
}

double TrainingRun::forward_backward(int64_t step, bool& loss_finite, int64_t& tokens) {
  model_.params().zero_grads();
  // Micro-batches: each loss is divided by K and multiplied by the (constant) loss scale before
  // backward, so the gradients sum to the scaled mean over the effective batch.
  // With N ranks each divides by N*K (the mean over all ranks' micro-batches, summed by a hook)
  // and reads its own K of the step's N*K positions.
  const int64_t K = config_.grad_accum;
  const int64_t NK = K * world_size();
  double loss = 0;
  loss_finite = true;
  tokens = 0;
  for (int64_t micro = 0; micro < K; ++micro) {
    micro_ = micro;
    const int64_t position = (step - 1) * NK + rank() * K + micro + 1;  // data and dropout stream position
    const ScopedPhase phase(step, "forward");
    data_.train_batch(position, batch_);
    // Padding is not work done: a classification batch says how many tokens are real.
    tokens += batch_.real_tokens > 0 ? batch_.real_tokens : batch_.inputs.numel();
    ModelOutput out = mp_.forward([&] {
      return model_.forward_batch(batch_, true, config_.seed ^ (static_cast<uint64_t>(position) << 20));
    });
    const double l = out.loss.value().item();
    loss += l / static_cast<double>(NK);
    if (!std::isfinite(l) && config_.lockstep_passes) {
      loss_finite = false;  // backward all the same: the other ranks' gathers need this rank's part
    } else if (!std::isfinite(l)) {
      loss_finite = false;
      // Nothing to learn from this step: it is skipped. The hooks still see every micro-batch
      // (the other ranks' collectives).
      if (!replaying_)
        for (int64_t rest = micro; rest < K - 1; ++rest) {
          micro_ = rest;
          for (auto& h : hooks_) h->micro_batch_done(*this, step);
        }
      break;
    }
    {
      // Exact accumulation: this micro-batch's gradients from zeros, each added to the sum of the
      // earlier ones once final (before a data-parallel hook's grad-ready callback sees it).
      std::optional<autograd::FreshGradScope> fresh;
      if (micro > 0 && config_.exact_accumulation) fresh.emplace();
      mp_.backward(out.loss, NK);
    }
    if (micro < K - 1 && !replaying_)
      for (auto& h : hooks_) h->micro_batch_done(*this, step);
  }
  return loss;
}

double TrainingRun::replay_step() {
  if (!in_nonfinite_) throw ArgumentError("TrainingRun::replay_step: only inside on_nonfinite");
  bool finite = true;
  int64_t tokens = 0;
  // A replay is this rank's alone: gradient hooks that talk to other ranks sit it out (replaying()).
  const FlagScope replaying(replaying_);
  return forward_backward(step_ + 1, finite, tokens);
}

namespace {
// Why the scaler's update changed (or kept) the scale; "" when nothing worth a line happened.
std::string scale_event(const GradScaler& sc, const GradScalerState& before, bool found_inf,
                        const StepRecord& r) {
  if (!sc.enabled() || !sc.config().dynamic) return "";
  const GradScalerState& now = sc.state();
  const std::string site = r.overflow_site.empty() ? "" : " first seen at " + r.overflow_site;
  const std::string why = r.loss_finite ? "a non-finite gradient" : "a non-finite loss";
  char b[64];
  if (found_inf) {
    if (now.scale == before.scale && now.hysteresis_left < before.hysteresis_left) {
      std::snprintf(b, sizeof b, " (%lld left)", static_cast<long long>(now.hysteresis_left));
      return "hysteresis consumed at step " + std::to_string(r.step) + b + ": " + why + site + "; scale kept";
    }
    std::snprintf(b, sizeof b, "%g -> %g", before.scale, now.scale);
    std::string e = "backoff " + std::string(b) + " at step " + std::to_string(r.step) + ": " + why + site;
    if (sc.hit_min_scale()) e += "; minimum reached";
    return e;
  }
  if (now.scale > before.scale) {
    std::snprintf(b, sizeof b, "%g -> %g", before.scale, now.scale);
    return "growth " + std::string(b) + " after " + std::to_string(sc.config().growth_interval) +
           " clean steps";
  }
  return "";
}
}  // namespace

StepRecord TrainingRun::step() {
  StepRecord r;
  r.step = step_ + 1;
  for (auto& h : hooks_) h->on_step_begin(*this, r.step);
  const double t0 = now_s();
  r.lr = lr_at(r.step, config_.schedule);
  ParameterStore& params = model_.params();
  r.loss = forward_backward(r.step, r.loss_finite, r.tokens);
  for (auto& h : hooks_) h->reduce_gradients(*this, r.step);
  if (world_size() > 1) {
    // One sum for both (rank order: one process's sum for N = 2, K = 1).
    double sums[2] = {r.loss, static_cast<double>(r.tokens)};
    config_.world->sum(std::span<double>(sums, 2));
    r.loss = sums[0];
    r.tokens = static_cast<int64_t>(sums[1]);
    r.loss_finite = std::isfinite(r.loss);
  }
  r.loss_scale = mp_.scaler().scale();
  r.found_inf = true;
  if (r.loss_finite) {
    for (auto& h : hooks_) h->after_backward(*this, r.step);
    const ScopedPhase phase(r.step, "optimizer update");
    // ZeRO: this rank holds its part of the summed gradients only (train/data_parallel.h).
    const StepResult s =
        zero_ != nullptr && world_size() > 1
            ? mp_.prepare_step_sharded(params, config_.grad_clip, zero_->partition(), *config_.world)
            : mp_.prepare_step(params, config_.grad_clip);
    // The gradients are the same everywhere after the sum, but a rank may still differ (a fault
    // injected on one rank): every rank skips when any found a non-finite value.
    r.found_inf = world_size() > 1 ? config_.world->any(s.found_inf) : s.found_inf;
    r.grad_norm = r.found_inf ? NAN : s.grad_norm;
    r.loss_scale = s.loss_scale;
    if (!r.found_inf) mp_.apply_step(optimizer_, params, r.lr);
  }
  if (r.found_inf) {
    // Before the scaler's update: a hook may re-run the step at the same loss scale.
    const FlagScope allowed(in_nonfinite_);  // replay_step is allowed while the hooks run, and only then
    for (auto& h : hooks_) h->on_nonfinite(*this, r);
  }
  const GradScalerState before = mp_.scaler().state();
  const bool at_floor_before = mp_.scaler().enabled() && before.scale <= mp_.scaler().min_scale_fp32();
  mp_.scaler().update(r.found_inf);
  r.scale_event = scale_event(mp_.scaler(), before, r.found_inf, r);
  r.skipped = r.found_inf;
  if (r.skipped) {
    ++summary_.skipped_steps;
    ++summary_.skips_by_site[r.overflow_site.empty() ? (r.loss_finite ? "(unknown)" : "(loss)")
                                                     : r.overflow_site];
  }
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
  // A dynamic scale already at its minimum that must back off again cannot recover: stop with
  // what to try instead of looping over skipped steps (DeepSpeed stops there too, unexplained).
  if (r.found_inf && at_floor_before && mp_.scaler().hit_min_scale()) {
    r.diverged = true;
    char b[64];
    std::snprintf(b, sizeof b, "%g", before.scale);
    r.stop_reason = "loss scale stuck at its minimum " + std::string(b) + ": step " + std::to_string(r.step) +
                    " overflowed there" + (r.overflow_site.empty() ? "" : " at " + r.overflow_site) +
                    "; try bf16-mixed, keeping that site in fp32 (keep_fp32), or a lower lr";
  }
  return r;
}

void TrainingRun::finish_summary() {
  summary_.elapsed_s = now_s() - run_start_;
  summary_.tokens_per_s = train_time_ > 0 ? static_cast<double>(train_tokens_) / train_time_ : 0.0;
  summary_.model_flops_per_s = model_.flops_per_token(data_.sequence_length()) * summary_.tokens_per_s;
  const double bytes_per_token = data_.eval_bytes_per_token();
  summary_.val_bits_per_byte =
      bytes_per_token > 0 ? summary_.val_loss / bytes_per_token / std::log(2.0) : NAN;
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
      if (!r.stop_reason.empty()) throw DivergedError(r.step, r.stop_reason, summary_);
      throw DivergedError(r.step, r.loss, bad_in_a_row_, summary_, r.overflow_site);
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
    if (world_size() > 1) {
      // mpirun passes SIGINT / SIGTERM to every rank, but not at the same moment: a rank that
      // latched it (InterruptHook, on_step_end) stops them all here, and rank 0 saves.
      const int64_t sig = config_.world->max(summary_.interrupted ? summary_.stop_signal : 0);
      if (sig > 0) {
        summary_.interrupted = true;
        summary_.stop_signal = static_cast<int>(sig);
      }
    }
    summary_.final_train_loss = r.loss;
    bool stop = false;
    for (auto& h : hooks_) stop = h->should_stop(*this, r) || stop;  // every hook sees every step
    if (world_size() > 1) stop = config_.world->any(stop);           // a signal may reach one rank first
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
  if (summary_.steps == config_.steps && !summary_.interrupted && !std::isfinite(summary_.val_loss)) {
    // Ended short of max_bad_steps non-finite steps in a row, but with a non-finite final loss:
    // its results mean nothing, and its speed is that of skipped steps. Returned (the summary is
    // the result), flagged as diverged: the CLI exits 3 on it, compare claims no speed-up.
    summary_.diverged = true;
    summary_.val_accuracy = NAN;
    summary_.divergence = "the final evaluation's loss is " +
                          std::string(std::isnan(summary_.val_loss) ? "NaN" : "infinite") + " (" +
                          std::to_string(summary_.skipped_steps) + " of " + std::to_string(summary_.steps) +
                          " steps skipped)";
  }
  for (auto& h : hooks_) h->on_run_end(*this, summary_);
  return summary_;
}

}  // namespace mixtrain
