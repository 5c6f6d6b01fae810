// The options of `finetune` (and of `compare --task classify`): the flags every task takes (precision,
// scaler, optimizer, logs, checkpoints: add_run_flags) with the fine-tune's defaults, and the
// data, model and epoch flags of FinetuneOptions (train/finetune.h).
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "mixtrain/train/finetune.h"
#include "train_options.h"

namespace mixtrain::cli {

struct FinetuneFlags {
  FinetuneOptions opt;  // opt.train is filled from `train` by finish()
  TrainFlags train;
  std::string pooling = "cls";
  std::string text_pair_column;
  // Converts the string flags (TrainFlags::finish) and copies the shared options into opt.train.
  void finish(const std::vector<PrecisionMode>& precisions = {});
};

// Adds the fine-tune's own flags (--model DIR, --task, --train, --test, columns, --max-len,
// --epochs, --pooling, --dropout, --train-examples, --test-examples) to `sub`; without
// `with_model_and_task`, not --model and --task (compare has its own, and sets them).
void add_finetune_data_flags(CLI::App* sub, FinetuneFlags& f, bool with_model_and_task = true);
// compare --task classify|finefoods|fortunes: the fine-tune's defaults for every training flag not
// given (compare registers train's, with a GPT run's defaults), --model as the encoder directory.
void finetune_from_compare_flags(FinetuneFlags& f, const TrainFlags& given, const std::string& task);
// The task options every command that trains takes (compare, bench train, memory, numerics):
// --task lm (a GPT on a text corpus, the default) or a fine-tune of an encoder classifier
// (classify: Fine Foods or --train/--test; finefoods; fortunes) with the fine-tune's data flags.
// The command registers train's flags (with a GPT run's defaults) itself.
struct TaskFlags {
  std::string task = "lm";
  FinetuneFlags finetune;
  CLI::App* app = nullptr;
  bool lm() const { return task == "lm"; }
  // For a fine-tune task: the options of the fine-tune, from the fine-tune's defaults for every
  // training flag not given (finetune_from_compare_flags). For lm: ArgumentError naming a
  // fine-tune flag that was given.
  FinetuneOptions finetune_options(const TrainFlags& given);
  void refuse_finetune_flags() const;
  // For a command that runs a few steps of any task (memory, numerics, bench train): none for lm
  // (refusing a fine-tune flag), else the fine-tune's options with the command's own run length
  // (given.opt.steps, eval_batches: its defaults, not a whole epoch and test set).
  std::optional<FinetuneOptions> short_finetune(const TrainFlags& given);
};
void add_task_flags(CLI::App* sub, TaskFlags& t);

// Adds the run flags every task takes (add_run_flags) with the fine-tune's defaults (lr 5e-5,
// weight decay 0.01, beta2 0.999, --steps unset: every epoch, --eval-batches 0: the whole test set)
// and, with `with_checkpoints`, the checkpoint flags but --init-from; a GPT's own flags (--data,
// --seq-len, --min-lr-ratio, --max-data-bytes) are never registered.
void add_finetune_train_flags(CLI::App* sub, FinetuneFlags& f, bool with_precision, bool with_checkpoints);

}  // namespace mixtrain::cli
