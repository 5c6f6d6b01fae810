// The fp32 training loop (mixed precision joins in the amp layer).
#include "mixtrain/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "mixtrain/amp/mixed_precision.h"
#include "mixtrain/data/text_corpus.h"
#include "mixtrain/kernels/backend.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/clip.h"
#include "mixtrain/optim/schedule.h"
#include "mixtrain/optim/sgd.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/train/checkpointing.h"

namespace mixtrain {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Mean validation loss over `batches` of the corpus's fixed windows, spread evenly over them.
double evaluate(Gpt& model, const TextCorpus& corpus, int64_t B, int64_t T, int64_t batches) {
  autograd::NoGradGuard no_grad;
  const int64_t available = corpus.num_val_batches(B, T);
  const int64_t n = std::min(batches, available);
  Tensor idx, targets;
  double total = 0, rows = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bi = n == available ? i : i * available / n;
    const int64_t real = corpus.val_batch(bi, B, T, idx, targets);
    const auto out = model.forward(idx, &targets, false);
    total += out.loss.value().item() * static_cast<double>(real);
    rows += static_cast<double>(real);
  }
  return rows > 0 ? total / rows : std::nan("");
}

// Plain-text progress: a bar redrawn in place on a terminal, one line every log_every steps
// otherwise (logs, CI).
class Progress {
 public:
  Progress(int64_t total, int64_t every, bool quiet) : total_(total), every_(every), quiet_(quiet), tty_(isatty(1)) {}
  void step(int64_t s, double loss, double tok_s, double lr) {
    if (quiet_) return;
    if (tty_) {
      const int width = 30;
      const int filled = static_cast<int>(width * s / total_);
      std::printf("\r[%.*s%*s] %lld/%lld loss %.4f  %.0f tok/s  lr %.2e ", filled,
                  "##############################", width - filled, "", static_cast<long long>(s),
                  static_cast<long long>(total_), loss, tok_s, lr);
      if (s == total_) std::printf("\n");
      std::fflush(stdout);
    } else if (s == 1 || s % every_ == 0 || s == total_) {
      std::printf("step %lld/%lld loss %.4f tok/s %.0f lr %.3e\n", static_cast<long long>(s),
                  static_cast<long long>(total_), loss, tok_s, lr);
      std::fflush(stdout);
    }
  }
  void line(const std::string& text) {
    if (quiet_) return;
    if (tty_) std::printf("\n");
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  int64_t total_, every_;
  bool quiet_, tty_;
};

// The JSONL step log: each line is written and flushed whole, so a run that stops keeps every
// completed step.
class StepLog {
 public:
  // A resumed run (resume_step > 0) keeps the log's lines up to resume_step and appends.
  StepLog(const std::string& path, int64_t resume_step) {
    if (path.empty()) return;
    if (resume_step > 0) trim_step_log(path, resume_step);
    f_ = std::make_unique<std::ofstream>(path, resume_step > 0 ? std::ios::app : std::ios::trunc);
    if (!*f_) throw IoError("cannot write log " + path);
  }
  void write(const nlohmann::ordered_json& j) {
    if (!f_) return;
    *f_ << j.dump() << '\n';
    f_->flush();
  }

 private:
  std::unique_ptr<std::ofstream> f_;
};

}  // namespace

void TrainOptions::validate() const {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) throw ArgumentError(std::string("--") + what + " must be positive, got " + std::to_string(v));
  };
  positive(steps, "steps");
  positive(batch_size, "batch-size");
  if (seq_len < 0) throw ArgumentError("--seq-len must be positive, got " + std::to_string(seq_len));
  if (!(lr > 0.f) || !std::isfinite(lr)) throw ArgumentError("--lr must be a positive number");
  if (warmup < 0 || warmup > steps) throw ArgumentError("--warmup must be in [0, --steps]");
  if (!(weight_decay >= 0.f)) throw ArgumentError("--weight-decay must be >= 0");
  if (!(grad_clip >= 0.f)) throw ArgumentError("--grad-clip must be >= 0 (0 disables clipping)");
  if (eval_every < 0) throw ArgumentError("--eval-every must be >= 0");
  positive(eval_batches, "eval-batches");
  positive(log_every, "log-every");
  positive(grad_accum, "grad-accum");
  for (int64_t s : inject_nonfinite)
    if (s < 1) throw ArgumentError("--inject-nonfinite steps count from 1, got " + std::to_string(s));
  if (max_bad_steps == 0 || max_bad_steps < -1) throw ArgumentError("--max-bad-steps must be positive");
  if (optimizer != "adamw" && optimizer != "sgd")
    throw ArgumentError("--optimizer must be adamw or sgd, got '" + optimizer + "'");
}

nlohmann::ordered_json TrainSummary::to_json() const {
  nlohmann::ordered_json j;
  j["steps"] = steps;
  if (std::isfinite(final_train_loss)) j["final_train_loss"] = final_train_loss;
  else j["final_train_loss"] = nullptr;
  if (std::isfinite(val_loss)) j["val_loss"] = val_loss;
  else j["val_loss"] = nullptr;
  j["unigram_baseline"] = unigram_baseline;
  j["tokens_per_s"] = tokens_per_s;
  j["model_flops_per_s"] = model_flops_per_s;
  j["gemm_flops_per_s"] = gemm_flops_per_s;
  j["mfu"] = mfu;
  j["parameters"] = parameters;
  j["elapsed_s"] = elapsed_s;
  const MemorySnapshot m = MemoryTracker::global().snapshot();
  j["peak_bytes"] = m.peak_total;
  nlohmann::ordered_json by;
  for (size_t c = 0; c < kNumMemCategories; ++c)
    if (m.peak[c] > 0) by[std::string(mem_category_name(static_cast<MemCategory>(c)))] = m.peak[c];
  j["peak_bytes_by_category"] = by;
  j["peak_rss_bytes"] = process_peak_rss_bytes();
  j["precision"] = precision;
  j["skipped_steps"] = skipped_steps;
  j["overflows"] = overflows;
  j["diverged"] = diverged;
  j["final_loss_scale"] = final_loss_scale;
  j["hit_min_scale"] = hit_min_scale;
  if (profiled_steps > 0) {
    // Per profiled step: each kind, "other" (the rest of the step: autograd bookkeeping, the
    // data batch, logging) and the step itself.
    nlohmann::ordered_json b;
    double known = 0;
    const double n = static_cast<double>(profiled_steps);
    for (size_t k = 0; k < kNumWorkKinds; ++k) {
      b[std::string(work_kind_name(static_cast<WorkKind>(k)))] = breakdown[k] / n;
      known += breakdown[k];
    }
    b["other"] = (profiled_seconds - known) / n;
    b["step"] = profiled_seconds / n;
    j["profiled_steps"] = profiled_steps;
    j["breakdown_s_per_step"] = b;
    j["system_allocations_per_step"] = static_cast<double>(profiled_system_allocations) / n;
  }
  return j;
}

double measure_gemm_flops(DType dtype, int64_t m, int64_t n, int64_t k, double seconds) {
  Tensor a = Tensor::randn({m, k}, dtype, 1, 0.f, 1.f, MemCategory::workspace);
  Tensor b = Tensor::randn({k, n}, dtype, 2, 0.f, 1.f, MemCategory::workspace);
  Tensor c = Tensor::empty({m, n}, DType::f32, MemCategory::workspace);
  gemm(a, b, c);  // warm-up (creates and caches the primitive)
  double best = 1e30;
  const auto t0 = Clock::now();
  do {
    const auto t = Clock::now();
    gemm(a, b, c);
    best = std::min(best, seconds_since(t));
  } while (seconds_since(t0) < seconds);
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / best;
}

namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Puts inf (or NaN at every second listed step) into the first gradient element.
void inject_nonfinite(ParameterStore& p, const std::vector<int64_t>& steps, int64_t step) {
  const auto pos = std::find(steps.begin(), steps.end(), step) - steps.begin();
  const double bad = pos % 2 == 0 ? INFINITY : NAN;
  store_from_f64(p.flat_grads().raw_data(), p.flat_grads().dtype(), 0, bad);
}

std::string json_number_or_null(double v) { return std::isfinite(v) ? std::to_string(v) : "null"; }

}  // namespace

DivergedError::DivergedError(int64_t s, double loss, int64_t bad, TrainSummary sum)
    : Error("training diverged: loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step " +
            std::to_string(s) + (bad > 1 ? " (" + std::to_string(bad) + " non-finite steps in a row)" : "") +
            "; lower --lr, enable --grad-clip, or use a loss scale"),
      step(s),
      summary(std::move(sum)) {}

TrainSummary train(const TrainOptions& opt) {
  opt.validate();
  const PrecisionSpec& spec = precision_spec(opt.precision);
  const GptConfig cfg = GptConfig::from_preset_or_file(opt.model);
  const int64_t T = opt.seq_len > 0 ? opt.seq_len : cfg.block_size;
  const int64_t B = opt.batch_size;
  if (T > cfg.block_size)
    throw ArgumentError("--seq-len " + std::to_string(T) + " exceeds the model's block_size " +
                        std::to_string(cfg.block_size));
  MixedPrecision mp(spec.name, opt.scaler, opt.force_loss_scaling);
  const TextCorpus corpus = TextCorpus::load(opt.data.empty() ? TextCorpus::default_corpus_path() : opt.data);
  corpus.check_window(T);
  if (cfg.vocab_size < 256)
    throw ArgumentError("model vocab_size " + std::to_string(cfg.vocab_size) + " is smaller than the 256 byte tokens");
  const int64_t max_bad = opt.max_bad_steps > 0 ? opt.max_bad_steps : (opt.precision == PrecisionMode::true32 ? 1 : 20);

  gemm_scratch_release();  // the peaks are this run's: no GEMM temporaries of an earlier one
  MemoryTracker::global().reset_peaks();
  // In the *-mixed modes the fp32 arena is the master copy of the 16-bit working weights, and is
  // accounted as such (the working copy, amp/mixed_precision.h, is MemCategory::parameters).
  const bool masters = spec.autocast && spec.param_dtype == DType::f32;
  Gpt model(cfg, opt.seed, spec.param_dtype, spec.grad_dtype,
            masters ? MemCategory::master_weights : MemCategory::parameters);
  model.set_activation_checkpointing(opt.checkpoint_activations);
  ParameterStore& params = model.params();
  std::unique_ptr<AdamW> adamw;
  std::unique_ptr<SGD> sgd;
  if (opt.optimizer == "adamw") {
    AdamWConfig ac;
    ac.lr = opt.lr;
    ac.beta1 = opt.beta1;
    ac.beta2 = opt.beta2;
    ac.eps = opt.eps;
    ac.weight_decay = opt.weight_decay;
    ac.rounding = opt.update_rounding;
    ac.seed = opt.seed;
    adamw = std::make_unique<AdamW>(params, ac);
  } else {
    SgdConfig sc;
    sc.lr = opt.lr;
    sc.momentum = opt.momentum;
    sc.weight_decay = opt.weight_decay;
    sc.rounding = opt.update_rounding;
    sc.seed = opt.seed;
    sgd = std::make_unique<SGD>(params, sc);
  }
  LrSchedule sched;
  sched.max_lr = opt.lr;
  sched.warmup_steps = opt.warmup;
  sched.total_steps = opt.steps;
  sched.min_lr = opt.lr * opt.min_lr_ratio;
  validate(sched);

  TrainSummary sum;
  int64_t bad_in_a_row = 0;
  TrainCheckpointing checkpoints(opt, cfg, T, corpus);
  const TrainingRefs refs{model, adamw.get(), sgd.get(), mp.scaler(), sum, bad_in_a_row};
  const int64_t start_step = checkpoints.resume(refs);  // 0 unless --resume found a checkpoint

  StepLog log(opt.log_jsonl, start_step);
  Progress progress(opt.steps, opt.log_every, opt.quiet);
  sum.precision = std::string(spec.name);
  sum.parameters = model.num_parameters();
  sum.unigram_baseline = corpus.unigram_entropy();
  const double flops_per_token = model.flops_per_token(T);
  const int64_t K = opt.grad_accum;

  auto eval = [&] { return mp.forward([&] { return evaluate(model, corpus, B, T, opt.eval_batches); }); };

  Tensor idx, targets;
  double train_time = 0;
  const auto run_start = Clock::now();
  int64_t allocations_before_profile = 0;
  for (int64_t step = start_step + 1; step <= opt.steps; ++step) {
    const bool profiled = opt.profile && step > start_step + opt.profile_warmup;
    if (profiled && sum.profiled_steps == 0) {
      Profiler::reset();
      allocations_before_profile = cpu_allocator_stats().system_allocations;
    }
    if (profiled) Profiler::set_enabled(true);
    const auto t0 = Clock::now();
    const float lr = lr_at(step, sched);
    params.zero_grads();
    // Micro-batches: each loss is divided by K and multiplied by the (constant) loss scale
    // before backward, so the gradients sum to the scaled mean over the effective batch.
    double loss = 0;
    bool loss_finite = true;
    for (int64_t micro = 0; micro < K; ++micro) {
      const int64_t position = (step - 1) * K + micro + 1;  // data and dropout stream position
      corpus.train_batch(B, T, opt.seed, position, idx, targets);
      Gpt::Output out = mp.forward(
          [&] { return model.forward(idx, &targets, true, opt.seed ^ (static_cast<uint64_t>(position) << 20)); });
      const double l = out.loss.value().item();
      loss += l / static_cast<double>(K);
      if (!std::isfinite(l)) {
        loss_finite = false;
        break;  // nothing to learn from this step: it is skipped below
      }
      mp.backward(out.loss, K);
    }

    StepResult r;
    r.loss_scale = mp.scaler().scale();
    r.found_inf = true;
    if (loss_finite) {
      if (contains(opt.inject_nonfinite, step)) inject_nonfinite(params, opt.inject_nonfinite, step);
      r = mp.prepare_step(params, opt.grad_clip);
      if (!r.found_inf) {
        if (adamw) mp.apply_step(*adamw, params, lr);
        else mp.apply_step(*sgd, params, lr);
      }
    }
    mp.scaler().update(r.found_inf);
    const bool found_inf = r.found_inf, skipped = r.found_inf;
    const double grad_norm = r.grad_norm, loss_scale = r.loss_scale;
    if (skipped) ++sum.skipped_steps;
    if (found_inf && loss_finite) ++sum.overflows;
    if (mp.scaler().hit_min_scale()) sum.hit_min_scale = true;
    const double dt = seconds_since(t0);
    train_time += dt;
    if (profiled) {
      Profiler::set_enabled(false);
      ++sum.profiled_steps;
      sum.profiled_seconds += dt;
      sum.breakdown = Profiler::seconds();
      sum.profiled_system_allocations = cpu_allocator_stats().system_allocations - allocations_before_profile;
    }
    const double tok_s = static_cast<double>(B * T * K) / dt;

    nlohmann::ordered_json j;
    j["step"] = step;
    if (std::isfinite(loss)) j["loss"] = loss;
    else j["loss"] = nullptr;
    j["lr"] = lr;
    if (std::isfinite(grad_norm)) j["grad_norm"] = grad_norm;
    else j["grad_norm"] = nullptr;
    j["tokens_per_s"] = tok_s;
    j["elapsed_s"] = seconds_since(run_start);
    j["loss_scale"] = loss_scale;
    j["skipped"] = skipped;
    j["found_inf"] = found_inf;
    j["overflows"] = sum.overflows;
    sum.steps = step;
    sum.final_loss_scale = mp.scaler().scale();
    if (!loss_finite) {
      ++bad_in_a_row;
      if (bad_in_a_row >= max_bad) {
        j["error"] = "non-finite loss";
        j["diverged"] = true;
        log.write(j);
        sum.diverged = true;
        sum.final_train_loss = loss;
        sum.val_loss = NAN;
        sum.elapsed_s = seconds_since(run_start);
        sum.tokens_per_s =
            static_cast<double>(B * T * K * (step - start_step)) / (train_time > 0 ? train_time : 1.0);
        sum.model_flops_per_s = flops_per_token * sum.tokens_per_s;
        throw DivergedError(step, loss, bad_in_a_row, sum);
      }
    } else {
      bad_in_a_row = 0;
    }
    if (opt.eval_every > 0 && step % opt.eval_every == 0 && step != opt.steps) {
      const double vl = eval();
      j["val_loss"] = vl;
      progress.line("step " + std::to_string(step) + " val_loss " + json_number_or_null(vl));
    }
    if (step == opt.steps) {
      sum.val_loss = eval();
      j["val_loss"] = sum.val_loss;
    }
    log.write(j);
    progress.step(step, loss, tok_s, lr);
    if (skipped) progress.line("step " + std::to_string(step) + ": non-finite gradients, step skipped (loss scale " +
                               std::to_string(loss_scale) + ")");
    sum.final_train_loss = loss;
    if (checkpoints.after_step(step, refs)) break;  // saves when due; true at --stop-after
  }
  if (start_step == opt.steps) sum.val_loss = eval();  // resumed from the final checkpoint
  else if (sum.steps < opt.steps) sum.val_loss = NAN;  // stopped early (--stop-after)
  sum.elapsed_s = seconds_since(run_start);
  const int64_t steps_run = sum.steps - start_step;
  sum.tokens_per_s = train_time > 0 ? static_cast<double>(B * T * K * steps_run) / train_time : 0.0;
  sum.model_flops_per_s = flops_per_token * sum.tokens_per_s;
  // MFU against this machine's GEMM rate for the dtype the model's GEMMs run in, measured now.
  if (opt.measure_gemm_rate) {
    sum.gemm_flops_per_s = measure_gemm_flops(spec.compute_dtype, 1024, 1024, 1024, 0.5);
    sum.mfu = sum.model_flops_per_s / sum.gemm_flops_per_s;
  }
  return sum;
}

GptMemoryOptions memory_options(const TrainOptions& o) {
  GptMemoryOptions m;
  m.precision = o.precision;
  m.batch_size = o.batch_size;
  m.seq_len = o.seq_len;
  m.checkpoint_activations = o.checkpoint_activations;
  m.optimizer = o.optimizer;
  m.momentum = o.momentum;
  m.update_rounding = o.update_rounding;
  m.grad_accum = o.grad_accum;
  m.steps = o.steps;
  m.eval_batches = o.eval_batches;
  return m;
}

}  // namespace mixtrain
