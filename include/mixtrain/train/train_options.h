// The options every training run takes, whatever its task (train/recipe.h), one struct per
// concern: precision and scaler, optimizer and schedule, run length and logging, outputs and
// checkpoints, data parallelism (RunOptions joins them); and the language-model task's own
// (LmOptions; TrainOptions, what train() takes, is both).
#pragma once
#include <array>
#include <csignal>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/amp/precision.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/train/data_parallel.h"
#include "mixtrain/train/numerics_hook.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

// Checkpoints, resuming, initial weights (the checkpoint hook, src/train/checkpointing.cpp).
struct CheckpointOptions {
  std::string dir;         // where step-NNNNNN/ checkpoints go; empty: no checkpoints
  int64_t save_every = 0;  // every N steps (and always at the last step); 0: only at the last
  int64_t keep = 0;        // newest checkpoints kept in dir; 0: all
  std::string resume;      // a checkpoint, or a directory of them (the newest valid one is used)
  int64_t stop_after = 0;  // end the run after this step (saving a checkpoint), as if stopped
  std::string init_from;   // start from these weights (safetensors file or checkpoint), fresh optimizer
  void validate() const;   // ArgumentError
};

// The options every run takes, one struct per concern; RunOptions joins them, and a task adds its
// own (LmOptions below, FinetuneOptions in train/finetune.h). A field's name is the one error
// messages use (the CLI says its flag instead: Error::fields()). Unset optionals mean the
// documented default, never a magic number.

// Precision and loss scaling (amp/precision.h, README "Precision modes").
struct PrecisionOptions {
  PrecisionMode precision = PrecisionMode::true32;
  UpdateRounding update_rounding = UpdateRounding::nearest;  // *-true modes
  // Loss scaling: on by default in 16-mixed; `force_loss_scaling` turns it on in other modes.
  GradScalerConfig scaler;
  bool force_loss_scaling = false;
  // Autocast keeps the ops of modules whose path matches one of these globs in fp32
  // (amp/autocast.h, set_autocast_keep_fp32), e.g. "transformer.h.5.mlp.*".
  std::vector<std::string> keep_fp32;
  // fp32 GEMMs' precision for the run (kernels/matmul_precision.h, torch.set_float32_matmul_precision).
  MatmulPrecision matmul_precision = MatmulPrecision::highest;
  // fp8-mixed's recipe, format and layers (amp/fp8.h); read only in that mode.
  Fp8Config fp8;
};

// The optimizer and the learning-rate schedule's shared part (a task adds its shape: LM's cosine
// floor, the fine-tune's linear decay).
struct OptimizerOptions {
  OptimizerKind optimizer = OptimizerKind::adamw;
  float lr = 1e-3f;
  int64_t warmup = 0;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;  // 0 disables
  float momentum = 0.9f;   // sgd
  // How the optimizer stores its moments (--optim-state, kernels/state_kernels.h): fp32, bf16
  // (stochastic rounding) or int8 (bitsandbytes' block-wise 8-bit state); bf16 and int8 need fp32
  // parameters (32-true, the *-mixed modes).
  StatePrecision optim_state = StatePrecision::fp32;
};

// The run's length, batching, evaluation, divergence and progress output.
struct RunLengthOptions {
  // Optimizer steps; unset: the task's own length (a fine-tune: every epoch; LM pre-training
  // needs it).
  std::optional<int64_t> steps = 200;
  int64_t batch_size = 16;
  int64_t grad_accum = 1;  // micro-batches per optimizer step (one loss scale per step)
  bool exact_grad_accum =
      false;  // RunConfig::exact_accumulation: micro-batch gradients made apart, then added
  bool checkpoint_activations =
      false;  // recompute each block in backward (Gpt::set_activation_checkpointing)
  // The LM head and its loss as one op (autograd::lm_head_loss): the logits a chunk of rows at a
  // time, never whole, in training steps (Model::set_fused_lm_head); evaluation keeps the logits.
  bool fused_lm_head = false;
  // Attention keeps no probabilities for backward and makes them again there (autograd::
  // AttentionProbs::recompute, Model::set_attention_recompute): same gradients, less memory.
  bool recompute_attention = false;
  uint64_t seed = 1337;
  int64_t eval_every = 0;    // 0: only at the end
  int64_t eval_batches = 8;  // validation batches per evaluation (a fine-tune: 0, the whole test set)
  // Consecutive steps with a non-finite loss before the run is declared diverged and stops;
  // unset: 1 in 32-true (nothing can recover an fp32 NaN) and 20 otherwise.
  std::optional<int64_t> max_bad_steps;
  // Fault injection: after backward at these optimizer steps (from 1) one gradient element is
  // set to inf (NaN at every second listed step); the step must be skipped, never applied.
  std::vector<int64_t> inject_nonfinite;
  int64_t log_every = 10;  // plain progress lines when stdout is not a terminal
  bool quiet = false;      // no progress output at all
  // Step-time breakdown (core/profiler.h) over the steps after the first profile_warmup ones
  // (which create GEMM primitives and fill the allocator's cache): `mixtrain bench train`.
  bool profile = false;
  int64_t profile_warmup = 2;
  // Measure the GEMM rate at the end for the MFU (its 1024^3 operands are workspace allocations
  // after the steps: the memory report turns it off so they stay out of the peaks).
  bool measure_gemm_rate = true;
};

// What the run writes: the step log, TensorBoard, numerics probes, checkpoints.
struct OutputOptions {
  std::string log_jsonl;  // per-step JSON lines; empty: none; "-": stdout
  // Replace an existing log_jsonl or numerics.path (without it: refused unless resuming), or a
  // fine-tune's existing save directory.
  bool overwrite = false;
  // Files the caller writes when the run ends (the CLI's --json FILE): checked with the run's own
  // paths before anything is loaded (not an input, not inside a checkpoint, writable), by what
  // names them ("--json").
  struct OutputFile {
    std::string what, path;
  };
  std::vector<OutputFile> also_writes;
  std::string tensorboard_dir;  // TensorBoard event files here (train/tensorboard_hook.h); empty: none
  // Checkpoints, resuming, initial weights (train/checkpointing.h).
  CheckpointOptions checkpoint;
  // Numerics probes (train/numerics_hook.h): numerics.path empty: none. A skipped step is re-run
  // to name the first non-finite op unless overflow_forensics is off.
  NumericsOptions numerics;
  bool overflow_forensics = true;
};

// Data parallelism (train/data_parallel.h).
struct DataParallelOptions {
  // The ranks (not owned; e.g. world() under mpirun); null or one rank: this process alone.
  // batch_size and grad_accum are per rank: N ranks train as one process with grad_accum
  // N * grad_accum. Only rank 0 writes the step log, TensorBoard files, checkpoints and progress;
  // every rank reads a checkpoint it resumes from.
  Communicator* world = nullptr;
  DataParallelConfig data_parallel;
  // The rank whose gradient inject_nonfinite poisons; unset: every rank.
  std::optional<int> inject_nonfinite_rank;
};

// Everything a run of any task takes (train/recipe.h: run_recipe).
struct RunOptions : PrecisionOptions, OptimizerOptions, RunLengthOptions, OutputOptions, DataParallelOptions {
  // Called with the run after the built-in hooks are attached, to attach more (e.g. to collect
  // every StepRecord); empty: none.
  std::function<void(TrainingRun&)> add_hooks;
  // Refused before anything is allocated when the memory predictor's peak exceeds the memory
  // the system has available (MemAvailable); force tries anyway.
  bool force = false;
  // The memory the run may take, in bytes, when less than what the system has available: the
  // same refusal above it (e.g. a share of a machine that other jobs use). Unset: MemAvailable.
  std::optional<int64_t> memory_limit;
  // Set asynchronously to a signal number (by a SIGINT/SIGTERM handler) to stop the run: it
  // finishes the current step, saves a checkpoint when checkpoint.dir is set, and returns a
  // summary with interrupted = true. Null: not interruptible.
  const volatile std::sig_atomic_t* stop_signal = nullptr;

  // Throws ArgumentError naming the field; a task's own validate() adds its checks.
  void validate() const;
  // The optimizer these options describe (kind, lr, betas, eps, momentum, weight decay, update
  // rounding, seed), for make_optimizer.
  OptimizerConfig optimizer_config() const;
  // max_bad_steps, or its default when unset: 1 in 32-true (nothing recovers an fp32 NaN), else 20.
  int64_t max_bad_steps_or_default() const;
};

// Language-model pre-training's own options (train(), train/trainer.h).
struct LmOptions {
  // Preset name or .json config path; empty: the configuration of checkpoint.init_from's weights
  // (a checkpoint's manifest, a file's mixtrain_config, a Hugging Face model's config.json).
  std::string model = "gpt-nano";
  std::string data;                // text file; empty: the built-in corpus
  std::optional<int64_t> seq_len;  // tokens per sequence; unset: the model's block_size
  float min_lr_ratio = 0.1f;       // cosine decay ends at lr * min_lr_ratio
  // Input limit; unset: data must be a regular file of at most 4 GiB (read whole), and a stream
  // ("-" for stdin, a FIFO, a device) is refused, as it may never end. Set: the limit for any
  // data, and a stream is read up to it (an explicit cap).
  std::optional<int64_t> max_data_bytes;
  // A byte-level BPE tokenizer directory (tokenizer.json, or vocab.json + merges.txt): the data is
  // encoded once into a token file (data/token_file.h) and trained on as its ids, and the model's
  // vocab_size becomes the tokenizer's (a config's larger vocab_size is kept). Empty: bytes.
  std::string tokenizer;
  // The token file: reused when it exists (IoError unless this tokenizer made it from this data,
  // split as now: a stale or foreign file is refused, never silently trained on), else written.
  // Empty: beside the data, "<data>.<tokenizer fingerprint>.tokens".
  std::string token_file;
};

// The options of train(): a run and its language-model task.
struct TrainOptions : RunOptions, LmOptions {
  TrainOptions() = default;
  TrainOptions(RunOptions run, LmOptions lm) : RunOptions(std::move(run)), LmOptions(std::move(lm)) {}
  void validate() const;  // RunOptions::validate and the task's own checks (ArgumentError)
};

}  // namespace mixtrain
