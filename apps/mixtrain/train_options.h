// The options shared by `train`, `compare` (and later `bench train`): one registration so every
// command that trains accepts the same flags with the same defaults.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "mixtrain/train/trainer.h"

namespace mixtrain::cli {

struct TrainFlags {
  TrainOptions opt;
  std::string precision = "32-true";
  std::string update_rounding = "nearest";
  std::string optimizer = "adamw";
  std::string loss_scale;       // "dynamic" or a number (static scale); empty: the mode's default
  std::string inject_nonfinite; // "3,7"
  // Converts the string flags into opt (throws ArgumentError with the flag's name).
  void finish();
};

// Adds every training flag to `sub`; `with_precision` adds --precision (compare has --precisions).
void add_train_flags(CLI::App* sub, TrainFlags& f, bool with_precision);
// Adds --checkpoint-dir, --save-every, --keep, --resume and --stop-after (train only: compare
// runs several modes, which one directory of checkpoints cannot hold).
void add_checkpoint_flags(CLI::App* sub, TrainFlags& f);

}  // namespace mixtrain::cli
