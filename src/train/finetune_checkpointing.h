// The fine-tune's checkpoints (TrainOptions::checkpoint: dir, save_every, keep, resume,
// stop_after) as a hook on its TrainingRun: the same directory layout, manifest and
// train_state.safetensors as train()'s (train/checkpointing.h), with the encoder's weights under
// their Hugging Face names in model.safetensors. The state's GPT config field is unused (left at
// its default); the encoder's configuration and the data's checksum are part of the recorded run
// options, so resuming with another model, data set or trajectory-shaping option is refused.
// A resumed run with the same options and thread count continues bit for bit.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/training_state.h"
#include "mixtrain/train/trainer.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

class FinetuneCheckpointing final : public TrainingHook {
 public:
  // opt: the run's shared options (checkpoint, seed, quiet, ...); run_options: everything else
  // that shapes the trajectory (model config, data checksum, max_len, epochs, ...), compared on
  // resume together with the optimizer, precision and scaler options of `opt`.
  FinetuneCheckpointing(const TrainOptions& opt, nlohmann::json run_options);
  // Restores from opt.checkpoint.resume (weights, optimizer, scaler, counters) and starts the run
  // after its step; refuses a directory that already holds checkpoints without resume.
  void on_run_start(TrainingRun& run) override;
  // Saves when due (save_every, the last step, stop_after, an interrupt); true at stop_after.
  bool should_stop(TrainingRun& run, const StepRecord& r) override;

 private:
  int64_t restore(TrainingRun& run);
  TrainingState capture(int64_t step, TrainingRun& run) const;
  const TrainOptions& opt_;
  nlohmann::json run_;
};

}  // namespace mixtrain
