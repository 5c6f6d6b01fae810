// run_recipe (train/recipe.h): the set-up every task shares, around the recipe's own parts.
#include "mixtrain/train/recipe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "mixtrain/dist/rank_agreement.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/device.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/output_paths.h"
#include "mixtrain/train/run_hooks.h"
#include "train/checkpointing.h"
#include "train/dir_lock.h"
#include "train/fp8_hooks.h"
#include "train/observer_hooks.h"
#include "train/rank_setup.h"

namespace mixtrain {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// "2.50 GiB", "310.4 MiB", "1000 bytes".
std::string gib(int64_t bytes) {
  char b[48];
  const double x = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(b, sizeof b, "%.2f GiB", x / double(1LL << 30));
  else if (bytes >= (int64_t{1} << 20))
    std::snprintf(b, sizeof b, "%.1f MiB", x / double(1LL << 20));
  else
    std::snprintf(b, sizeof b, "%lld bytes", static_cast<long long>(bytes));
  return b;
}

// Every option that shapes the trajectory or the collectives (not where the outputs go, nor how
// often progress is printed): ranks that differ in one would deadlock, abort or drift apart.
std::vector<AgreedField> trajectory_fields(const RunOptions& o) {
  const auto i = [](int64_t v) { return std::to_string(v); };
  const auto num = agreed_number;
  std::string inject;
  for (const int64_t s : o.inject_nonfinite) inject += i(s) + ",";
  std::string keep;
  for (const std::string& k : o.keep_fp32) keep += k + ",";
  const GradScalerConfig& g = o.scaler;
  const CheckpointOptions& c = o.checkpoint;
  return {
      {"steps", o.steps ? i(*o.steps) : "every epoch"},
      {"batch_size", i(o.batch_size)},
      {"lr", num(o.lr)},
      {"warmup", i(o.warmup)},
      {"weight_decay", num(o.weight_decay)},
      {"beta1", num(o.beta1)},
      {"beta2", num(o.beta2)},
      {"eps", num(o.eps)},
      {"grad_clip", num(o.grad_clip)},
      {"optimizer", std::string(optimizer_kind_name(o.optimizer))},
      {"momentum", num(o.momentum)},
      {"optim_state", std::string(state_precision_name(o.optim_state))},
      {"seed", std::to_string(o.seed)},
      {"eval_every", i(o.eval_every)},
      {"eval_batches", i(o.eval_batches)},
      {"precision", std::string(precision_spec(o.precision).name)},
      {"matmul_precision", std::string(matmul_precision_name(o.matmul_precision))},
      {"update_rounding", i(static_cast<int>(o.update_rounding))},
      {"grad_accum", i(o.grad_accum)},
      {"exact_grad_accum", i(o.exact_grad_accum)},
      {"loss_scale", i(g.enabled) + " " + i(g.dynamic) + " " + num(g.init_scale) + " " +
                         num(g.growth_factor) + " " + num(g.backoff_factor) + " " + i(g.growth_interval) +
                         " " + i(g.hysteresis) + " " + num(g.min_scale) + " " + num(g.max_scale) + " " +
                         i(o.force_loss_scaling)},
      {"inject_nonfinite",
       inject + " rank " + (o.inject_nonfinite_rank ? i(*o.inject_nonfinite_rank) : "all")},
      {"max_bad_steps", i(o.max_bad_steps_or_default())},
      {"keep_fp32", keep},
      {"fp8", o.precision == PrecisionMode::mixed_fp8 ? fp8_run_options(o.fp8).dump() : "off"},
      {"checkpoint_activations", i(o.checkpoint_activations)},
      {"fused_lm_head", i(o.fused_lm_head)},
      {"recompute_attention", i(o.recompute_attention)},
      {"checkpoint.save_every", i(c.dir.empty() ? -1 : c.save_every)},
      {"checkpoint.stop_after", i(c.stop_after)},
      {"checkpoint.resume", c.resume.empty() ? "no" : "yes"},
      {"checkpoint.init_from", c.init_from.empty() ? "no" : "yes"},
      {"numerics.every", i(o.numerics.path.empty() ? -1 : o.numerics.every)},
      {"overflow_forensics", i(o.overflow_forensics)},
      {"profile", i(o.profile)},
      {"data_parallel.zero_stage", i(o.data_parallel.zero_stage)},
      {"data_parallel.reduce_dtype", std::string(dtype_name(o.data_parallel.reduce_dtype))},
      {"data_parallel.allgather_dtype", std::string(dtype_name(o.data_parallel.allgather_dtype))},
      {"data_parallel.bucket_bytes", i(o.data_parallel.bucket_bytes)},
      {"data_parallel.verify_replicas", i(o.data_parallel.verify_replicas)},
  };
}

// One run of the prepared recipe with these ranks: the model, the precision mode, the optimizer,
// the loop and its hooks; at most max_steps optimizer steps (the memory check's first two).
TrainSummary run_prepared(Recipe& recipe, const RunOptions& opt, const RankSetup& ranks,
                          int64_t max_steps = INT64_MAX) {
  const PrecisionSpec& spec = precision_spec(opt.precision);
  MixedPrecision mp(opt.precision, opt.scaler, opt.force_loss_scaling);
  gemm_scratch_release();                  // the peaks are this run's: no GEMM temporaries of an earlier one
  MemoryTracker::current().reset_peaks();  // the meta device's in a prediction
  ProcessMemory process;
  if (!default_device().is_meta()) {
    cpu_allocator_release_cached();  // an earlier run's cached blocks (compare runs them in one process)
    process = process_memory_at_start();
  }
  const std::unique_ptr<Model> model = [&] {
    const std::unique_ptr<GradientPartScope> part = gradient_part_scope(ranks);  // ZeRO-2
    return recipe.make_model(spec, weights_category(spec), opt);
  }();
  model->set_activation_checkpointing(opt.checkpoint_activations);
  if (opt.fused_lm_head) model->set_fused_lm_head(true);
  if (opt.recompute_attention) model->set_attention_recompute(true);
  const std::unique_ptr<Optimizer> optimizer = make_run_optimizer(ranks, model->params(), opt);

  RunConfig rc;
  rc.grad_clip = opt.grad_clip;
  rc.grad_accum = opt.grad_accum;
  rc.exact_accumulation = opt.exact_grad_accum;
  rc.seed = opt.seed;
  rc.eval_every = opt.eval_every;
  rc.eval_batches = opt.eval_batches;
  rc.max_bad_steps = opt.max_bad_steps_or_default();
  rc.world = ranks.world;
  rc.lockstep_passes = ranks.zero_stage == 3;  // its passes gather parameters collectively
  recipe.configure(rc, opt);
  rc.steps = std::min(rc.steps, max_steps);
  TrainingRun run(*model, *optimizer, mp, recipe.data(), rc);
  // Hook order: the checkpoint restores first (the log trims to its step), then data parallelism,
  // then the observers, the recipe's own and the caller's.
  if (opt.stop_signal) run.add_hook(std::make_unique<InterruptHook>(opt.stop_signal));
  if (std::unique_ptr<TrainingHook> ckpt = recipe.checkpointing(as_one_process(opt, ranks), *model))
    run.add_hook(std::move(ckpt));
  else if (!opt.checkpoint.dir.empty() || !opt.checkpoint.resume.empty() || !opt.checkpoint.init_from.empty())
    throw ArgumentError({"checkpoint.dir"},
                        "this task keeps no checkpoints: checkpoint.dir, resume and init_from do not apply");
  add_data_parallel_hooks(run, ranks, opt, recipe.finish_reads_weights(opt));
  add_observer_hooks(run, opt);
  recipe.add_hooks(run, opt);
  if (opt.add_hooks) opt.add_hooks(run);
  const KeepFp32Scope keep(opt.keep_fp32);
  // fp8-mixed: the linear layers' sites (amp/fp8.h), installed for the run, updated after each step.
  std::unique_ptr<Fp8State> fp8;
  if (opt.precision == PrecisionMode::mixed_fp8) {
    fp8 = std::make_unique<Fp8State>(opt.fp8, model->fp8_linears(), opt.keep_fp32);
    if (fp8->sites().empty())
      throw ArgumentError(
          {"fp8.keep_first_last"},
          "fp8-mixed: no linear layer runs in fp8 (the model has " +
              std::to_string(model->fp8_linears().size()) +
              " transformer blocks; the first and last stay bf16 unless fp8.keep_first_last is off, "
              "and fp8.keep / keep_fp32 keep the rest)");
    run.add_hook(std::make_unique<Fp8UpdateHook>(*fp8, ranks.world));
    run.set_fp8(fp8.get());
  }
  const Fp8Scope fp8_scope(fp8.get());
  TrainSummary sum;
  try {
    sum = run.run();
  } catch (DivergedError& e) {
    e.summary.memory = MemoryTracker::current().snapshot();
    e.summary.process = process;
    if (!default_device().is_meta()) process_memory_at_end(e.summary.process);
    throw;
  }
  sum.memory = MemoryTracker::current().snapshot();
  const bool meta = default_device().is_meta();
  sum.process = process;
  if (!meta) process_memory_at_end(sum.process);
  // Not for a run that ends diverged (its weights are what made the loss non-finite).
  if (!meta && !sum.interrupted && !sum.diverged && (ranks.world == nullptr || ranks.world->rank() == 0))
    recipe.finish(*model, sum, opt);
  sum.gemm_dtype = spec.compute_dtype;
  // MFU against this machine's GEMM rate for the dtype the model's GEMMs run in, measured now.
  if (opt.measure_gemm_rate && !sum.interrupted && !meta) {
    sum.gemm_flops_per_s = measure_gemm_flops(spec.compute_dtype, 1024, 1024, 1024, 0.5);
    sum.mfu = sum.model_flops_per_s / sum.gemm_flops_per_s;
  }
  return sum;
}

}  // namespace

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

RunOptions measured_run_options(RunOptions m) {
  m.quiet = true;
  m.measure_gemm_rate = false;
  m.log_jsonl.clear();
  m.numerics.path.clear();       // no probes
  m.overflow_forensics = false;  // nor re-runs
  m.profile = false;
  m.checkpoint = CheckpointOptions{};  // no files: resuming or saving would read or write them
  m.tensorboard_dir.clear();           // nor event files
  m.add_hooks = nullptr;               // the caller's hooks watch the real run
  m.stop_signal = nullptr;             // a prediction is not interrupted half-way
  return m;
}

TrainSummary run_recipe(Recipe& recipe, const RunOptions& opt_in) {
  RunOptions opt = opt_in;
  // Every fp32 GEMM of the run (and of its memory prediction) at the run's matmul precision.
  const MatmulPrecisionScope matmul_precision(opt.matmul_precision);
  if (opt.log_jsonl == "-") opt.quiet = true;  // stdout carries the log
  // What the ranks must agree on, before setup_ranks clears the other ranks' outputs.
  std::vector<AgreedField> agreed = trajectory_fields(opt);
  const RankSetup ranks = setup_ranks(opt);  // rank 0 alone writes what a run writes
  // On the meta device (a prediction) nothing is read beyond the inputs or written, and predictions
  // are serialized: a nested one would wait for itself.
  const bool meta = default_device().is_meta();
  DirectoryLock lock;
  if (!meta) {
    // Every path checked, and the checkpoint directory locked, before anything is loaded or trained.
    std::vector<RunPaths::Entry> inputs;
    for (const RecipePath& p : recipe.inputs(opt)) inputs.push_back({p.what, p.path});
    RunPaths paths = run_paths(opt, inputs);
    for (const RunOptions::OutputFile& f : opt.also_writes) paths.outputs.push_back({f.what, f.path});
    if (ranks.world == nullptr || ranks.world->rank() == 0)  // the rank that writes
      for (const RecipePath& p : recipe.output_dirs(opt)) paths.output_dirs.push_back({p.what, p.path});
    check_run_paths(paths);
    if (!opt.checkpoint.dir.empty()) lock = DirectoryLock(opt.checkpoint.dir, "checkpoint.dir");
  }
  recipe.prepare(opt, ranks.ranks());
  if (ranks.world != nullptr && !meta) {
    // Before the first collective: the ranks run one trajectory, on the same data.
    for (AgreedField& f : recipe.agreement(opt)) agreed.push_back(std::move(f));
    check_ranks_agree(*ranks.world, agreed);
  }
  if (!opt.force && !meta) {
    const int64_t system = available_memory_bytes();
    const bool limited = opt.memory_limit && (system <= 0 || *opt.memory_limit < system);
    const int64_t available = limited ? *opt.memory_limit : system;
    if (available > 0) {
      // The run itself on the meta device (train/memory_prediction.h), cut to its first steps: the
      // peak is reached in the first two (the second holds the optimizer state and the working
      // copies; an evaluation is smaller than a step).
      RunOptions probe = measured_run_options(opt);
      probe.eval_every = 0;
      probe.inject_nonfinite.clear();
      // This rank's memory alone, without collectives (a ZeRO run's part: the meta world).
      std::unique_ptr<MetaWorld> meta_world;
      if (ranks.world != nullptr)
        meta_world = std::make_unique<MetaWorld>(ranks.world->rank(), ranks.world->size());
      probe.world = meta_world.get();
      const int64_t predicted = predict_memory([&] {
                                  const RankSetup probe_ranks = setup_ranks(probe);
                                  run_prepared(recipe, probe, probe_ranks, 2);
                                }).peak_bytes;
      if (predicted > available && limited)
        throw ArgumentError({"memory_limit", "force"}, "the run needs about " + gib(predicted) +
                                                           " (predicted peak) but memory_limit allows " +
                                                           gib(available) + "; force tries anyway");
      if (predicted > available)
        throw ArgumentError({"force"}, "the run needs about " + gib(predicted) +
                                           " (predicted peak) but only " + gib(available) +
                                           " is available; force tries anyway");
    }
  }
  return run_prepared(recipe, opt, ranks);
}

}  // namespace mixtrain
