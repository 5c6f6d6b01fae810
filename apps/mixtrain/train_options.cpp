// Training flags shared by the commands that train.
#include "train_options.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "commands.h"
#include "mixtrain/train/output_paths.h"

namespace mixtrain::cli {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {
volatile std::sig_atomic_t g_training = 0;  // a run's first step has begun
constexpr unsigned kStartupGraceSeconds = 2;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) _exit(128 + sig);  // the second signal: at once
  g_stop_signal = sig;
  // During start-up the run stops at its first step, unless start-up is still going after the
  // grace period (a read blocked on a FIFO with no writer, a long tokenization): then at once.
  if (g_training == 0) alarm(kStartupGraceSeconds);
}

extern "C" void on_startup_alarm(int) {
  if (g_training == 0) _exit(128 + g_stop_signal);
}

// Ends start-up when the run's first step begins (after resuming and opening its logs).
class TrainingStartedHook final : public TrainingHook {
 public:
  void on_step_begin(TrainingRun&, int64_t) override {
    if (g_training != 0) return;
    g_training = 1;
    alarm(0);  // a stop requested during start-up is taken at this step's end
  }
};

void warn(const std::string& line) {
  std::fprintf(stderr, "mixtrain: warning: %s\n", one_line(line).c_str());
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the step in progress finishes; its I/O is not cut short
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction alarm_sa {};
  alarm_sa.sa_handler = on_startup_alarm;
  sigemptyset(&alarm_sa.sa_mask);
  sigaction(SIGALRM, &alarm_sa, nullptr);
}

void make_interruptible(RunOptions& o) {
  o.stop_signal = &g_stop_signal;
  o.add_hooks = [inner = std::move(o.add_hooks)](TrainingRun& run) {
    if (inner) inner(run);
    run.add_hook(std::make_unique<TrainingStartedHook>());
  };
}

void add_lm_flags(CLI::App* sub, TrainFlags& f) {
  LmOptions& o = f.opt;
  sub->add_option("--model", o.model,
                  "Preset (gpt-nano, gpt-mini, gpt2-small) or a JSON config file (with --init-from and no "
                  "--model: the configuration of those weights)")
      ->capture_default_str();
  sub->add_option("--data", o.data, "UTF-8 text file (default: the built-in fortunes corpus)");
  sub->add_option_function<int64_t>(
      "--seq-len", [&o](const int64_t& v) { o.seq_len = v; },
      "Tokens per sequence (default: the model's block size)");
  sub->add_option("--min-lr-ratio", o.min_lr_ratio, "Cosine decay floor as a fraction of --lr")
      ->capture_default_str();
  sub->add_option_function<int64_t>(
      "--max-data-bytes", [&o](const int64_t& v) { o.max_data_bytes = v; },
      "Refuse --data larger than this (default 4 GiB); needed to read a stream: - (stdin) or a FIFO");
  sub->add_option(
      "--tokenizer", o.tokenizer,
      "A byte-level BPE tokenizer directory (tokenizer.json, or vocab.json + merges.txt; `mixtrain "
      "tokenizer train` writes one): train on its ids, encoded once into a token file; the "
      "model's vocabulary becomes the tokenizer's");
  sub->add_option("--token-file", o.token_file,
                  "With --tokenizer: the token file to reuse or write (default: <data>.<tokenizer "
                  "fingerprint>.tokens beside the data); one made by another tokenizer or from other data is "
                  "refused");
}

void add_optimizer_flags(CLI::App* sub, TrainFlags& f) {
  OptimizerOptions& o = f.opt;
  sub->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  sub->add_option("--warmup", o.warmup, "Linear warm-up steps")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay, "Decoupled weight decay (matrices only)")
      ->capture_default_str();
  sub->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  sub->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--grad-clip", o.grad_clip, "Clip the global gradient norm (0: off)")
      ->capture_default_str();
  sub->add_option("--optimizer", f.optimizer, "adamw or sgd")->capture_default_str();
  sub->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--optim-state", f.optim_state,
                  "How the optimizer stores its moments: fp32; bf16 (stochastic rounding); int8 "
                  "(bitsandbytes' block-wise 8-bit state: blocks of 256, dynamic maps, fp32 below 4096 "
                  "elements). bf16 and int8 need fp32 weights: 32-true or a *-mixed mode")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}))
      ->capture_default_str();
}

void add_run_length_flags(CLI::App* sub, TrainFlags& f, const RunLengthHelp& help) {
  RunLengthOptions& o = f.opt;
  sub->add_option_function<int64_t>(
         "--steps", [&o](const int64_t& v) { o.steps = v; }, help.steps)
      ->default_str(o.steps ? std::to_string(*o.steps) : "");
  sub->add_option("--batch-size", o.batch_size, "Sequences per micro-batch")->capture_default_str();
  sub->add_option("--grad-accum", o.grad_accum, "Micro-batches per optimizer step")->capture_default_str();
  sub->add_flag(
      "--exact-grad-accum", o.exact_grad_accum,
      "Make each micro-batch's gradient of a parameter apart and add it when final (as PyTorch; "
      "the memory of the gradients in progress): N ranks then match one process with --grad-accum N "
      "bit for bit");
  sub->add_flag("--checkpoint-activations", o.checkpoint_activations,
                "Keep only each block's input for backward and recompute the block there");
  sub->add_flag("--fused-lm-head", o.fused_lm_head,
                "Training steps compute the LM head and its loss a chunk of rows at a time (the logits, "
                "B x T x V, never whole; made again in backward); a language model only");
  sub->add_flag("--recompute-attention", o.recompute_attention,
                "Attention keeps no probabilities (B*H x T x T) for backward and computes them again there "
                "from q and k, as FlashAttention (the same gradients bit for bit; one more q k^T and softmax "
                "per block); the encoders' attention always does");
  sub->add_option("--seed", o.seed, "Seed for weights, batches and dropout")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.find('-') != std::string::npos ? std::string("must be >= 0, got " + v) : "";
          },
          "UINT"));
  sub->add_option("--eval-every", o.eval_every, "Validation every K steps (0: only at the end)")
      ->capture_default_str();
  sub->add_option("--eval-batches", o.eval_batches, help.eval_batches)->capture_default_str();
  sub->add_option("--log-every", o.log_every, "Progress line every K steps when not on a terminal")
      ->capture_default_str();
  sub->add_option("--inject-nonfinite", f.inject_nonfinite,
                  "STEP[,STEP..]: put inf (NaN at every second) into a gradient at these steps");
  sub->add_option_function<int64_t>(
      "--max-bad-steps", [&o](const int64_t& v) { o.max_bad_steps = v; },
      "Non-finite losses in a row before the run stops as diverged (default 1 in 32-true, 20 otherwise)");
  RunOptions& r = f.opt;
  sub->add_flag("--force", r.force, "Train even when the predicted memory exceeds the available memory");
  sub->add_option_function<int64_t>(
      "--memory-limit", [&r](const int64_t& v) { r.memory_limit = v; },
      "Refuse a run whose predicted peak exceeds BYTES (default: the memory the system has available)");
}

void add_output_flags(CLI::App* sub, TrainFlags& f) {
  OutputOptions& o = f.opt;
  sub->add_option("--log-jsonl", o.log_jsonl, "Write one JSON line per step to FILE (-: stdout)");
  sub->add_flag("--overwrite", o.overwrite,
                "Replace an existing --log-jsonl or --numerics file (a resumed run appends to it), or "
                "finetune's --save directory");
  sub->add_option("--tensorboard", o.tensorboard_dir,
                  "Write TensorBoard event files (the step log's scalars) to DIR");
  sub->add_option("--numerics", o.numerics.path,
                  "Numerics probes: one JSON line per named site (op outputs, gradients, weights, updates) "
                  "per sampled step to FILE");
  sub->add_option("--numerics-every", o.numerics.every,
                  "Sample the numerics probes every N steps (steps 1, 1+N, ...)")
      ->capture_default_str();
  sub->add_flag("!--no-overflow-forensics", o.overflow_forensics,
                "Do not re-run a skipped step to name the first op whose output went non-finite");
}

void add_precision_flags(CLI::App* sub, TrainFlags& f, bool with_precision) {
  PrecisionOptions& o = f.opt;
  if (with_precision)
    sub->add_option("--precision", f.precision,
                    "32-true, 16-mixed, bf16-mixed, 16-true, bf16-true or fp8-mixed")
        ->capture_default_str();
  sub->add_option("--update-rounding", f.update_rounding,
                  "Rounding of 16-bit weight updates in *-true modes: nearest, stochastic, kahan, or master "
                  "(fp32 master weights and state in the optimizer)")
      ->capture_default_str();
  sub->add_option(
         "--matmul-precision", f.matmul_precision,
         "fp32 GEMMs (32-true's, the fp32 ops of the mixed modes), as torch.set_float32_matmul_precision: "
         "highest (fp32), high (as highest: no TF32/bf16x3 kernel on CPUs), medium (bf16 products where "
         "oneDNN runs them on the matrix units: AMX)")
      ->check(CLI::IsMember({"highest", "high", "medium"}))
      ->capture_default_str();
  sub->add_option("--loss-scale", f.loss_scale,
                  "dynamic, or a static scale (default: dynamic in 16-mixed, none elsewhere)");
  sub->add_option("--init-scale", o.scaler.init_scale, "Initial loss scale")->capture_default_str();
  sub->add_option("--growth-interval", o.scaler.growth_interval, "Clean steps before the scale grows")
      ->capture_default_str();
  sub->add_option("--growth-factor", o.scaler.growth_factor, "Loss scale growth factor")
      ->capture_default_str();
  sub->add_option("--backoff-factor", o.scaler.backoff_factor, "Loss scale backoff factor")
      ->capture_default_str();
  sub->add_option("--hysteresis", o.scaler.hysteresis, "Overflows tolerated before backing off (DeepSpeed)")
      ->capture_default_str();
  sub->add_option("--min-scale", o.scaler.min_scale,
                  "Lower bound of the loss scale (reaching it is reported)");
  sub->add_option("--max-scale", o.scaler.max_scale, "Upper bound of the loss scale");
  sub->add_option(
      "--keep-fp32", o.keep_fp32,
      "PATTERN (repeatable): autocast runs the modules matching this glob (and their children) in fp32, "
      "e.g. 'transformer.h.5.mlp.*'");
  sub->add_option(
         "--fp8-recipe", f.fp8_recipe,
         "fp8-mixed: delayed (Transformer Engine's DelayedScaling), current (per-tensor amax at each cast), "
         "rowwise (a scale per row along the summed dimension, torchao), mxfp8 (OCP MX: 32-element blocks, "
         "E8M0 scales) or block (1x128 activations and gradients, 128x128 weights, power-of-two scales)")
      ->check(CLI::IsMember({"delayed", "current", "rowwise", "mxfp8", "block"}))
      ->capture_default_str();
  sub->add_option(
         "--fp8-format", f.fp8_format,
         "fp8-mixed: hybrid (E4M3 activations and weights, E5M2 gradients) or e4m3 (default: hybrid for "
         "delayed and current, e4m3 for rowwise, mxfp8 and block)")
      ->check(CLI::IsMember({"hybrid", "e4m3"}));
  sub->add_option("--fp8-amax-history", o.fp8.amax_history, "fp8-mixed, delayed: amax history length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--fp8-amax-compute", f.fp8_amax_compute,
                  "fp8-mixed, delayed: the history's max, or its most_recent entry")
      ->check(CLI::IsMember({"max", "most_recent"}))
      ->capture_default_str();
  sub->add_option("--fp8-margin", o.fp8.margin, "fp8-mixed, delayed: scale = fp8_max / amax / 2^margin")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  sub->add_option(
      "--fp8-keep", o.fp8.keep,
      "PATTERN (repeatable): fp8-mixed keeps the linear layers of the modules matching this glob in "
      "bf16, e.g. 'transformer.h.3.mlp.*'");
  sub->add_flag("--fp8-first-last{false}", o.fp8.keep_first_last,
                "fp8-mixed: the first and last transformer block in fp8 too (by default they stay bf16)");
}

void add_run_flags(CLI::App* sub, TrainFlags& f, bool with_precision, const RunLengthHelp& help) {
  f.app = sub;
  add_run_length_flags(sub, f, help);
  add_optimizer_flags(sub, f);
  add_output_flags(sub, f);
  add_precision_flags(sub, f, with_precision);
}

void add_train_flags(CLI::App* sub, TrainFlags& f, bool with_precision) {
  add_lm_flags(sub, f);
  add_run_flags(sub, f, with_precision, RunLengthHelp{});
}

void add_checkpoint_flags(CLI::App* sub, TrainFlags& f, bool with_init_from) {
  CheckpointOptions& c = f.opt.checkpoint;
  sub->add_option("--checkpoint-dir", c.dir,
                  "Save checkpoints as DIR/step-NNNNNN/ (always at the last step)");
  sub->add_option("--save-every", c.save_every, "Save a checkpoint every N steps (needs --checkpoint-dir)");
  sub->add_option("--keep", c.keep, "Keep only the K newest checkpoints (0: all)")->capture_default_str();
  sub->add_option(
      "--resume", c.resume,
      "Continue from a checkpoint, or from the newest valid one in a directory (--steps stays the total)");
  sub->add_option("--stop-after", c.stop_after,
                  "Stop after this step, saving a checkpoint, as if interrupted");
  if (with_init_from)
    sub->add_option(
        "--init-from", c.init_from,
        "Start from these weights: a GPT-2 layout safetensors file (Hugging Face's too) or a checkpoint");
}

void add_data_parallel_flags(CLI::App* sub, TrainFlags& f) {
  sub->add_option("--grad-reduce-dtype", f.grad_reduce_dtype,
                  "Under mpirun: sum gradients over ranks in fp32, bf16 (half the bytes), int8 or fp8 (E4M3; "
                  "a quarter: blockwise with error feedback; --zero 1, 2 or 3, fp32 gradients)")
      ->capture_default_str();
  sub->add_option("--allgather-dtype", f.allgather_dtype,
                  "Under mpirun with --zero 3: gather each block's parameters in fp32 (each buffer as it is, "
                  "exact), bf16 (fp32 buffers rounded), int8 or fp8 (E4M3; blockwise, a scale per 2048); a "
                  "rank's own part stays exact, checkpoints are gathered exactly")
      ->capture_default_str();
  sub->add_option("--bucket-mb", f.bucket_mb, "Under mpirun: MiB of gradients per all-reduce bucket")
      ->capture_default_str();
  sub->add_flag(
      "--verify-replicas", f.opt.data_parallel.verify_replicas,
      "Under mpirun: after every step, check that every rank holds rank 0's weights and loss scale");
  sub->add_option(
         "--zero", f.opt.data_parallel.zero_stage,
         "Under mpirun: 1 shards the optimizer state over the ranks (ZeRO stage 1: reduce-scatter of the "
         "gradients, each rank updates its part, all-gather of the weights); 2 the gradients too (ZeRO "
         "stage 2: a rank holds its part of the summed gradients only); 3 the parameters too (ZeRO stage "
         "3: each block's weights gathered before its forward and backward, released after); 0: every "
         "rank keeps it all")
      ->capture_default_str();
  sub->add_option_function<int>(
      "--inject-nonfinite-rank", [&f](const int& v) { f.opt.inject_nonfinite_rank = v; },
      "Under mpirun: the rank whose gradient --inject-nonfinite poisons (default: every rank)");
}

void TrainFlags::finish(const std::vector<PrecisionMode>& precisions) {
  // First: the warnings below compare other flags with the run's length.
  if (given("--steps") && opt.steps && *opt.steps < 1)
    throw ArgumentError("--steps must be positive, got " + std::to_string(*opt.steps));
  // A given empty path or a given 0 would silently mean "unset": refused, naming the flag.
  for (const char* flag : {"--data", "--model", "--log-jsonl", "--checkpoint-dir", "--resume", "--init-from",
                           "--numerics", "--tokenizer", "--token-file"})
    if (given(flag) && app->get_option(flag)->as<std::string>().empty())
      throw ArgumentError(std::string(flag) + ": empty path");
  // --init-from without --model: the model is what the weights are (their configuration).
  if (given("--init-from") && !given("--model")) opt.model.clear();
  if (opt.seq_len && *opt.seq_len <= 0)
    throw ArgumentError("--seq-len must be positive, got " + std::to_string(*opt.seq_len) +
                        " (leave it out for the model's block size)");
  // A given 0 is not "unset": it is refused with what omitting the flag does.
  if (given("--save-every") && opt.checkpoint.save_every <= 0)
    throw ArgumentError("--save-every must be a step count >= 1, got " +
                        std::to_string(opt.checkpoint.save_every) +
                        " (without it a checkpoint is saved at the last step only)");
  if (opt.max_data_bytes && *opt.max_data_bytes <= 0)
    throw ArgumentError("--max-data-bytes must be a byte count >= 1, got " +
                        std::to_string(*opt.max_data_bytes) +
                        " (without it --data may be a regular file of up to 4 GiB)");
  if (given("--stop-after") && opt.checkpoint.stop_after <= 0)
    throw ArgumentError("--stop-after must be a step >= 1, got " + std::to_string(opt.checkpoint.stop_after));
  if (given("--stop-after") && opt.steps && opt.checkpoint.stop_after >= *opt.steps)
    warn("--stop-after " + std::to_string(opt.checkpoint.stop_after) +
         " has no effect: the run ends at --steps " + std::to_string(*opt.steps));
  opt.precision = parse_precision(precision);
  opt.update_rounding = parse_update_rounding(update_rounding);
  opt.optim_state = parse_state_precision(optim_state);
  opt.matmul_precision = *parse_matmul_precision(matmul_precision);  // CLI::IsMember checked it
  opt.fp8.recipe = parse_fp8_recipe(fp8_recipe);
  opt.fp8.format = fp8_format.empty() ? std::nullopt : std::optional<Fp8Format>(parse_fp8_format(fp8_format));
  opt.fp8.amax_compute = parse_fp8_amax_compute(fp8_amax_compute);
  opt.optimizer = parse_optimizer_kind(optimizer);
  if (!loss_scale.empty()) {
    opt.force_loss_scaling = true;
    if (loss_scale == "dynamic") {
      opt.scaler.dynamic = true;
    } else {
      double v = 0;
      size_t used = 0;
      try {
        v = std::stod(loss_scale, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != loss_scale.size() || !(v > 0) || !std::isfinite(v))
        throw ArgumentError("--loss-scale must be 'dynamic' or a positive number, got '" + loss_scale + "'");
      if (v > std::numeric_limits<float>::max())  // the scale multiplies an fp32 loss
        throw ArgumentError("--loss-scale must be finite in fp32 (at most 3.4e38), got '" + loss_scale + "'");
      opt.scaler.dynamic = false;
      opt.scaler.init_scale = v;
    }
  }
  // The dtypes data travels in between ranks, as the flags spell them.
  const auto wire_dtype = [](const std::string& flag, const std::string& v) {
    if (v == "fp32") return DType::f32;
    if (v == "bf16") return DType::bf16;
    if (v == "int8") return DType::i8;
    if (v == "fp8") return DType::f8_e4m3;
    throw ArgumentError(flag + " must be fp32, bf16, int8 or fp8, got '" + v + "'");
  };
  opt.data_parallel.reduce_dtype = wire_dtype("--grad-reduce-dtype", grad_reduce_dtype);
  opt.data_parallel.allgather_dtype = wire_dtype("--allgather-dtype", allgather_dtype);
  if (!(bucket_mb > 0) || !(bucket_mb <= 1 << 20))
    throw ArgumentError("--bucket-mb must be in (0, 1048576], got " + std::to_string(bucket_mb));
  opt.data_parallel.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * (1 << 20)));
  if (opt.data_parallel.zero_stage < 0 || opt.data_parallel.zero_stage > 3)
    throw ArgumentError(
        "--zero must be 0, 1 (ZeRO stage 1: optimizer state sharded over the ranks), 2 (gradients too) or 3 "
        "(parameters too), got " +
        std::to_string(opt.data_parallel.zero_stage));
  if (opt.inject_nonfinite_rank && *opt.inject_nonfinite_rank < 0)
    throw ArgumentError("--inject-nonfinite-rank must be a rank >= 0, got " +
                        std::to_string(*opt.inject_nonfinite_rank));
  opt.inject_nonfinite.clear();
  std::stringstream ss(inject_nonfinite);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const long long s = std::stoll(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      opt.inject_nonfinite.push_back(s);
    } catch (const std::exception&) {
      throw ArgumentError("--inject-nonfinite takes step numbers like 3,7; got '" + item + "'");
    }
  }
  warn_ineffective(precisions.empty() ? std::vector<PrecisionMode>{opt.precision} : precisions);
}

void TrainFlags::warn_ineffective(const std::vector<PrecisionMode>& modes) const {
  auto any = [&](auto pred) { return std::any_of(modes.begin(), modes.end(), pred); };
  if (given("--update-rounding") &&
      !any([](PrecisionMode m) { return precision_spec(m).param_dtype != DType::f32; }))
    warn("--update-rounding has no effect: it rounds 16-bit weights, and " +
         std::string(precision_spec(modes.front()).name) + " keeps fp32 weights");
  if (opt.matmul_precision != MatmulPrecision::highest && !matmul_precision_uses_bf16(opt.matmul_precision))
    warn("--matmul-precision " + matmul_precision +
         " runs fp32 GEMMs as highest here: " + matmul_precision_route(opt.matmul_precision));
  if (opt.optimizer == OptimizerKind::adamw && given("--momentum"))
    warn("--momentum has no effect with --optimizer adamw (it is SGD's)");
  if (opt.optimizer == OptimizerKind::sgd)
    for (const char* flag : {"--beta1", "--beta2"})
      if (given(flag)) warn(std::string(flag) + " has no effect with --optimizer sgd (it is AdamW's)");
  for (int64_t step : opt.inject_nonfinite)
    if (opt.steps && step > *opt.steps)
      warn("--inject-nonfinite step " + std::to_string(step) + " has no effect: the run ends at --steps " +
           std::to_string(*opt.steps));
  const bool scaling =
      opt.force_loss_scaling || any([](PrecisionMode m) { return m == PrecisionMode::mixed16; });
  if (!scaling)
    for (const char* flag : {"--init-scale", "--growth-interval", "--growth-factor", "--backoff-factor",
                             "--hysteresis", "--min-scale", "--max-scale"})
      if (given(flag))
        warn(std::string(flag) + " has no effect: no loss scaling in this mode (--loss-scale turns it on)");
  if (opt.steps && opt.eval_every > *opt.steps)
    warn("--eval-every " + std::to_string(opt.eval_every) + " has no effect: the run ends at --steps " +
         std::to_string(*opt.steps) + " (evaluated there anyway)");
  if (given("--numerics-every") && opt.numerics.path.empty())
    warn("--numerics-every has no effect without --numerics FILE");
  for (const char* flag : {"--fp8-recipe", "--fp8-format", "--fp8-amax-history", "--fp8-amax-compute",
                           "--fp8-margin", "--fp8-keep", "--fp8-first-last"})
    if (given(flag) && !any([](PrecisionMode m) { return m == PrecisionMode::mixed_fp8; }))
      warn(std::string(flag) + " has no effect: it configures --precision fp8-mixed");
  for (const char* flag : {"--fp8-amax-history", "--fp8-amax-compute", "--fp8-margin"})
    if (given(flag) && opt.fp8.recipe != Fp8Recipe::delayed)
      warn(std::string(flag) + " has no effect: it configures --fp8-recipe delayed");
  if (given("--keep-fp32") && !any([](PrecisionMode m) { return precision_spec(m).autocast; }))
    warn("--keep-fp32 has no effect: " + std::string(precision_spec(modes.front()).name) +
         " has no autocast (every op already runs in the weights' dtype)");
  if (given("--save-every") && opt.steps && opt.checkpoint.save_every >= *opt.steps)
    warn("--save-every " + std::to_string(opt.checkpoint.save_every) +
         " has no effect: a checkpoint is saved at the last step anyway");
}

}  // namespace mixtrain::cli
