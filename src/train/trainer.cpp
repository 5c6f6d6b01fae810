// `mixtrain train`: the run assembled from its options (the loop is train/training_run.cpp).
#include "mixtrain/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/data/text_corpus.h"
#include "kernels/backend.h"
#include "kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/optim/schedule.h"
#include "mixtrain/tensor/allocator.h"
#include "train/checkpointing.h"
#include "mixtrain/train/run_hooks.h"
#include "mixtrain/train/tensorboard_hook.h"

namespace mixtrain {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

void TrainOptions::validate() const {
  // Messages name the fields as spelled here; the CLI says its flags instead (Error::fields()).
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) bad(field, " must be positive, got " + std::to_string(v));
  };
  positive(steps, "steps");
  positive(batch_size, "batch_size");
  if (batch_size > (int64_t{1} << 20)) bad("batch_size", " must be at most 2^20 (1048576), got " + std::to_string(batch_size));
  if (seq_len < 0) bad("seq_len", " must be positive, got " + std::to_string(seq_len));
  if (!(lr > 0.f) || !std::isfinite(lr)) bad("lr", " must be a positive number");
  if (warmup < 0 || warmup > steps) throw ArgumentError({"warmup", "steps"}, "warmup must be in [0, steps]");
  if (!(weight_decay >= 0.f)) bad("weight_decay", " must be >= 0");
  if (!(grad_clip >= 0.f)) bad("grad_clip", " must be >= 0 (0 disables clipping)");
  if (eval_every < 0) bad("eval_every", " must be >= 0");
  positive(eval_batches, "eval_batches");
  positive(log_every, "log_every");
  positive(grad_accum, "grad_accum");
  for (int64_t s : inject_nonfinite)
    if (s < 1) bad("inject_nonfinite", " steps count from 1, got " + std::to_string(s));
  if (max_bad_steps == 0 || max_bad_steps < -1) bad("max_bad_steps", " must be positive");
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

TrainSummary train(const TrainOptions& opt) {
  opt.validate();
  const PrecisionSpec& spec = precision_spec(opt.precision);
  const GptConfig cfg = GptConfig::from_preset_or_file(opt.model);
  const int64_t T = opt.seq_len > 0 ? opt.seq_len : cfg.block_size;
  if (T > cfg.block_size)
    throw ArgumentError({"seq_len"}, "seq_len " + std::to_string(T) + " exceeds the model's block_size " +
                                         std::to_string(cfg.block_size));
  MixedPrecision mp(spec.name, opt.scaler, opt.force_loss_scaling);
  const TextCorpus corpus = TextCorpus::load(opt.data.empty() ? TextCorpus::default_corpus_path() : opt.data);
  const LmWindows data(corpus, opt.batch_size, T, opt.seed);
  if (cfg.vocab_size < 256)
    throw ArgumentError("model vocab_size " + std::to_string(cfg.vocab_size) + " is smaller than the 256 byte tokens");

  gemm_scratch_release();  // the peaks are this run's: no GEMM temporaries of an earlier one
  MemoryTracker::current().reset_peaks();  // the meta device's in a prediction
  // In the *-mixed modes the fp32 arena is the master copy of the 16-bit working weights, and is
  // accounted as such (the working copy, optim/mixed_precision.h, is MemCategory::parameters).
  const bool masters = spec.autocast && spec.param_dtype == DType::f32;
  Gpt model(cfg, opt.seed, spec.param_dtype, spec.grad_dtype,
            masters ? MemCategory::master_weights : MemCategory::parameters);
  model.set_activation_checkpointing(opt.checkpoint_activations);
  OptimizerConfig oc;
  oc.kind = opt.optimizer;
  oc.lr = opt.lr;
  oc.beta1 = opt.beta1;
  oc.beta2 = opt.beta2;
  oc.eps = opt.eps;
  oc.momentum = opt.momentum;
  oc.weight_decay = opt.weight_decay;
  oc.rounding = opt.update_rounding;
  oc.seed = opt.seed;
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(model.params(), oc);

  RunConfig rc;
  rc.steps = opt.steps;
  rc.schedule.max_lr = opt.lr;
  rc.schedule.warmup_steps = opt.warmup;
  rc.schedule.total_steps = opt.steps;
  rc.schedule.min_lr = opt.lr * opt.min_lr_ratio;
  rc.grad_clip = opt.grad_clip;
  rc.grad_accum = opt.grad_accum;
  rc.seed = opt.seed;
  rc.eval_every = opt.eval_every;
  rc.eval_batches = opt.eval_batches;
  // Nothing can recover an fp32 NaN: 32-true stops at the first by default.
  rc.max_bad_steps = opt.max_bad_steps > 0 ? opt.max_bad_steps : (opt.precision == PrecisionMode::true32 ? 1 : 20);
  TrainingRun run(model, *optimizer, mp, data, rc);
  // Hook order: the checkpoint restores first (the log trims to its step), the profile is taken
  // around the step only.
  run.add_hook(std::make_unique<TrainCheckpointing>(opt, model, T, corpus));
  if (opt.profile) run.add_hook(std::make_unique<ProfileHook>(opt.profile_warmup));
  if (!opt.inject_nonfinite.empty()) run.add_hook(std::make_unique<FaultInjectionHook>(opt.inject_nonfinite));
  run.add_hook(std::make_unique<StepLogHook>(opt.log_jsonl));
  if (!opt.tensorboard_dir.empty())
    run.add_hook(std::make_unique<TensorBoardHook>(opt.tensorboard_dir, !opt.checkpoint.resume.empty()));
  run.add_hook(std::make_unique<ProgressHook>(opt.log_every, opt.quiet));
  if (opt.add_hooks) opt.add_hooks(run);
  TrainSummary sum = run.run();
  // MFU against this machine's GEMM rate for the dtype the model's GEMMs run in, measured now.
  if (opt.measure_gemm_rate) {
    sum.gemm_flops_per_s = measure_gemm_flops(spec.compute_dtype, 1024, 1024, 1024, 0.5);
    sum.mfu = sum.model_flops_per_s / sum.gemm_flops_per_s;
  }
  return sum;
}


}  // namespace mixtrain
