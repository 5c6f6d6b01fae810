// The flags of the commands that train, one registration per concern (the option structs of
// train/train_options.h), so every command that trains accepts the same flags with the same
// defaults and registers only the groups that apply to it: nothing is removed after registration.
#pragma once
#include <CLI/CLI.hpp>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/train/trainer.h"

namespace mixtrain::cli {

struct TrainFlags {
  TrainOptions opt;
  std::string precision = "32-true";
  std::string update_rounding = "nearest";
  std::string matmul_precision = "highest";
  std::string fp8_recipe = "delayed";
  std::string fp8_format;  // empty: the recipe's default
  std::string fp8_amax_compute = "max";
  std::string optimizer = "adamw";
  std::string optim_state = "fp32";
  std::string loss_scale;        // "dynamic" or a number (static scale); empty: the mode's default
  std::string inject_nonfinite;  // "3,7"
  std::string grad_reduce_dtype = "fp32";
  std::string allgather_dtype = "fp32";
  double bucket_mb = 25;
  const CLI::App* app = nullptr;  // the command the flags belong to (which flags were given)
  // Converts the string flags into opt (throws ArgumentError with the flag's name); refuses an
  // empty path or a 0 that would silently mean "unset"; warns about a given option that has no
  // effect in this configuration. `precisions`: the modes the command will run (compare runs
  // several); empty: opt.precision.
  void finish(const std::vector<PrecisionMode>& precisions = {});
  bool given(const char* flag) const {
    return app != nullptr && app->get_option_no_throw(flag) != nullptr && app->count(flag) > 0;
  }
  void warn_ineffective(const std::vector<PrecisionMode>& modes) const;
};

// The help of the run-length flags whose meaning differs by task.
struct RunLengthHelp {
  const char* steps = "Optimizer steps";
  const char* eval_batches = "Validation batches per evaluation";
};
// The flags every task takes, with f.opt's values as their defaults: run length and logging
// (--steps, --batch-size, ..., --force, --memory-limit), optimizer and schedule, outputs (--log-jsonl,
// --tensorboard, --numerics, ...), precision and loss scaling; `with_precision` adds --precision
// (compare has --precisions).
void add_run_flags(CLI::App* sub, TrainFlags& f, bool with_precision, const RunLengthHelp& help);
// Language-model pre-training's own: --model, --data, --seq-len, --min-lr-ratio, --max-data-bytes.
void add_lm_flags(CLI::App* sub, TrainFlags& f);
// Both: the flags of a command that trains a GPT.
void add_train_flags(CLI::App* sub, TrainFlags& f, bool with_precision);
// The stop request of SIGINT / SIGTERM: the signal number, set by the handler and nothing else
// (a second signal exits at once with 128 + signal). install_stop_handlers() before training.
// A signal during start-up (before a run's first step: reading data, tokenizing, the memory
// prediction) stops the run at its first step, as any other; but when start-up is still going 2 s
// later (a read blocked on a FIFO with no writer blocks forever), the process ends at once with
// 128 + signal: nothing has been written then that a stop could save.
extern volatile std::sig_atomic_t g_stop_signal;
void install_stop_handlers();
// Makes the run of `o` stop at a step boundary on g_stop_signal, and marks the end of start-up
// when its first step begins.
void make_interruptible(RunOptions& o);

// Adds --checkpoint-dir, --save-every, --keep, --resume and --stop-after, and --init-from (a GPT's
// starting weights) with `with_init_from` (train and finetune only: compare runs several modes,
// which one directory of checkpoints cannot hold).
void add_checkpoint_flags(CLI::App* sub, TrainFlags& f, bool with_init_from);
// Adds --grad-reduce-dtype, --bucket-mb and --inject-nonfinite-rank (train under mpirun).
void add_data_parallel_flags(CLI::App* sub, TrainFlags& f);

}  // namespace mixtrain::cli
