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
#include "mixtrain/tensor/device.h"
#include "train/checkpointing.h"
#include "train/dir_lock.h"
#include "train/model_config.h"
#include "train/numerics_sites.h"
#include "train/observer_hooks.h"
#include "train/output_paths.h"
#include "train/rank_setup.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/run_hooks.h"
#include "mixtrain/train/tensorboard_hook.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>

namespace mixtrain {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

OptimizerConfig TrainOptions::optimizer_config() const {
  OptimizerConfig oc;
  oc.kind = optimizer;
  oc.lr = lr;
  oc.beta1 = beta1;
  oc.beta2 = beta2;
  oc.eps = eps;
  oc.momentum = momentum;
  oc.weight_decay = weight_decay;
  oc.rounding = update_rounding;
  oc.seed = seed;
  return oc;
}

int64_t TrainOptions::max_bad_steps_or_default() const {
  // Nothing can recover an fp32 NaN: 32-true stops at the first by default.
  return max_bad_steps > 0 ? max_bad_steps : (precision == PrecisionMode::true32 ? 1 : 20);
}

void TrainOptions::validate() const {
  // Messages name the fields as spelled here; the CLI says its flags instead (Error::fields()).
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) bad(field, " must be positive, got " + std::to_string(v));
  };
  positive(steps, "steps");
  positive(batch_size, "batch_size");
  if (!numerics.path.empty()) numerics.validate();
  for (const std::string& p : keep_fp32)
    if (p.empty()) bad("keep_fp32", " has an empty pattern");
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
  if (data_parallel.zero_stage != 0 && data_parallel.zero_stage != 1)
    bad("zero", " must be 0 or 1 (ZeRO stage 1: optimizer state sharded over the ranks), got " +
                    std::to_string(data_parallel.zero_stage));
  if (max_data_bytes < 0) bad("max_data_bytes", " must be >= 0 (0: the default), got " + std::to_string(max_data_bytes));
  if (!(min_lr_ratio >= 0.f && min_lr_ratio <= 1.f)) bad("min_lr_ratio", " must be in [0, 1]");
  if (!(beta1 >= 0.f && beta1 < 1.f)) bad("beta1", " must be in [0, 1)");
  if (!(beta2 >= 0.f && beta2 < 1.f)) bad("beta2", " must be in [0, 1)");
  if (!(eps > 0.f)) bad("eps", " must be positive");
  if (!(momentum >= 0.f) || !std::isfinite(momentum)) bad("momentum", " must be >= 0");
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

// The data: a regular file of at most max_bytes (4 GiB when 0), or, with an explicit max_bytes, a
// stream ("-": stdin, a FIFO, a device) read up to it. IoError naming the file and the limit.
TextCorpus load_data(const std::string& path, int64_t max_bytes) {
  constexpr int64_t kDefaultMax = int64_t{4} << 30;
  const int64_t limit = max_bytes > 0 ? max_bytes : kDefaultMax;
  auto over = [&](const std::string& size) {
    return IoError({"max_data_bytes"}, "data file " + path + " is " + size + ", over the " +
                                           (max_bytes > 0 ? "max_data_bytes limit of " + std::to_string(limit)
                                                          : "default limit of " + std::to_string(limit) +
                                                                " (raise it with max_data_bytes)"));
  };
  struct stat st {};
  const bool stdin_data = path == "-";
  if (!stdin_data && (::stat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
    if (S_ISREG(st.st_mode) && st.st_size > limit) throw over(std::to_string(st.st_size) + " bytes");
    return TextCorpus::load(path);  // names a missing file or a directory itself
  }
  if (max_bytes <= 0)
    throw IoError({"max_data_bytes"}, "data " + path +
                                          " is not a regular file (a stream may never end): give max_data_bytes to read "
                                          "it up to that size");
  const int fd = stdin_data ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("data file " + path + ": cannot be read (" + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 16);
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const std::string why = std::strerror(errno);
      if (!stdin_data) ::close(fd);
      throw IoError("data file " + path + ": read error (" + why + ")");
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
    if (static_cast<int64_t>(bytes.size()) > limit) {
      if (!stdin_data) ::close(fd);
      throw over("more than " + std::to_string(limit) + " bytes");
    }
  }
  if (!stdin_data) ::close(fd);
  return TextCorpus::from_bytes(std::move(bytes), path);
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

std::string gib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / double(1LL << 30));
  return b;
}

}  // namespace

TrainSummary train(const TrainOptions& opt_in) {
  opt_in.validate();
  TrainOptions opt = opt_in;
  if (opt.log_jsonl == "-") opt.quiet = true;  // stdout carries the log
  const RankSetup ranks = setup_ranks(opt);  // rank 0 alone writes what a run writes
  Communicator* world = ranks.world;
  // Every path checked, and the checkpoint directory locked, before anything is loaded or trained.
  check_run_paths(train_run_paths(opt));
  DirectoryLock lock;
  if (!opt.checkpoint.dir.empty()) lock = DirectoryLock(opt.checkpoint.dir, "checkpoint.dir");
  const PrecisionSpec& spec = precision_spec(opt.precision);
  const GptConfig cfg = load_model_config(opt.model);
  const int64_t T = opt.seq_len > 0 ? opt.seq_len : cfg.block_size;
  if (T > cfg.block_size)
    throw ArgumentError({"seq_len"}, "seq_len " + std::to_string(T) + " exceeds the model's block_size " +
                                         std::to_string(cfg.block_size));
  // (Not for data from a stream: the probe would consume it.)
  struct stat data_st {};
  const bool stream_data = opt.data == "-" || (!opt.data.empty() && ::stat(opt.data.c_str(), &data_st) == 0 &&
                                               !S_ISREG(data_st.st_mode) && !S_ISDIR(data_st.st_mode));
  // Nor inside a prediction: a run on the meta device allocates nothing real (and predictions
  // are serialized: a nested one would wait for itself).
  if (!opt.force && !stream_data && !default_device().is_meta()) {
    const int64_t available = available_memory_bytes();
    if (available > 0) {
      // The run itself on the meta device (train/memory_prediction.h), forced (no nested check)
      // and cut to its first steps: the peak is reached in the first two (the second holds the
      // optimizer state and the working copies; the final evaluation is smaller than a step).
      TrainOptions probe = opt;
      probe.force = true;
      probe.steps = std::min<int64_t>(opt.steps, 2);
      probe.warmup = std::min(probe.warmup, probe.steps);
      probe.eval_every = 0;
      probe.inject_nonfinite.clear();
      probe.checkpoint.stop_after = 0;
      probe.checkpoint.save_every = 0;
      // This rank's memory alone, without collectives (a ZeRO run's part: the meta world).
      std::unique_ptr<MetaWorld> meta_world;
      if (world != nullptr) meta_world = std::make_unique<MetaWorld>(world->rank(), world->size());
      probe.world = meta_world.get();
      const int64_t predicted = predict_train_memory(probe).peak_bytes;
      if (predicted > available)
        throw ArgumentError({"force"}, "the run needs about " + gib(predicted) + " (predicted peak) but only " +
                                           gib(available) + " is available; force tries anyway");
    }
  }
  MixedPrecision mp(spec.name, opt.scaler, opt.force_loss_scaling);
  const TextCorpus corpus =
      load_data(opt.data.empty() ? TextCorpus::default_corpus_path() : opt.data, opt.max_data_bytes);
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
  const std::unique_ptr<Optimizer> optimizer = make_run_optimizer(ranks, model.params(), opt);

  RunConfig rc;
  rc.steps = opt.steps;
  rc.schedule.max_lr = opt.lr;
  rc.schedule.warmup_steps = opt.warmup;
  rc.schedule.total_steps = opt.steps;
  rc.schedule.min_lr = opt.lr * opt.min_lr_ratio;
  rc.grad_clip = opt.grad_clip;
  rc.grad_accum = opt.grad_accum;
  rc.exact_accumulation = opt.exact_grad_accum;
  rc.seed = opt.seed;
  rc.eval_every = opt.eval_every;
  rc.eval_batches = opt.eval_batches;
  rc.max_bad_steps = opt.max_bad_steps_or_default();
  rc.world = world;
  TrainingRun run(model, *optimizer, mp, data, rc);
  // Hook order: the checkpoint restores first (the log trims to its step), then data parallelism.
  if (opt.stop_signal) run.add_hook(std::make_unique<InterruptHook>(opt.stop_signal));
  run.add_hook(std::make_unique<TrainCheckpointing>(as_one_process(opt, ranks), model, T, corpus));
  add_data_parallel_hooks(run, ranks, opt);
  add_observer_hooks(run, opt);
  if (opt.add_hooks) opt.add_hooks(run);
  const KeepFp32Scope keep(opt.keep_fp32);
  TrainSummary sum = run.run();
  // MFU against this machine's GEMM rate for the dtype the model's GEMMs run in, measured now.
  if (opt.measure_gemm_rate && !sum.interrupted) {
    sum.gemm_flops_per_s = measure_gemm_flops(spec.compute_dtype, 1024, 1024, 1024, 0.5);
    sum.mfu = sum.model_flops_per_s / sum.gemm_flops_per_s;
  }
  return sum;
}


}  // namespace mixtrain
