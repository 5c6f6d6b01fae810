// The options of `finetune` (and of `compare --task classify`): train's flags (precision, scaler,
// optimizer, logs, checkpoints) with the fine-tune's defaults, minus the GPT-only ones, plus the
// data, model and epoch flags of FinetuneOptions (train/finetune.h).
#pragma once
#include <CLI/CLI.hpp>

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
// Adds train's flags with the fine-tune's defaults (lr 5e-5, weight decay 0.01, beta2 0.999,
// --steps 0: every epoch, --eval-batches 0: the whole test set), without those that only a GPT
// run reads (--data, --seq-len, --min-lr-ratio, --max-data-bytes, --init-from).
void add_finetune_train_flags(CLI::App* sub, FinetuneFlags& f, bool with_precision, bool with_checkpoints);

}  // namespace mixtrain::cli
