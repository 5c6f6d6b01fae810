// The trainer's checkpoints (TrainOptions::checkpoint: dir, save_every, keep, resume, stop_after,
// init_from) as a hook on the TrainingRun (train/training_run.h): it restores when the run
// starts and saves (or stops the run) after each step.
//
// A checkpoint (checkpoint/checkpoint_dir.h) holds model.safetensors (checkpoint/gpt_weights.h:
// the weights in Hugging Face's GPT-2 layout) and train_state.safetensors
// (checkpoint/training_state.h: master weights, optimizer state, scaler, counters, RNG
// positions). A resumed run with the same options and thread count continues bit for bit.
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/training_state.h"
#include "mixtrain/train/trainer.h"  // TrainOptions, CheckpointOptions
#include "mixtrain/train/training_run.h"

namespace mixtrain {

class TextCorpus;


class TrainCheckpointing final : public TrainingHook {
 public:
  // model: the run's model (its weights go to model.safetensors in GPT-2's layout); T: the
  // sequence length in use; corpus: the training data (its checksum is part of the run).
  TrainCheckpointing(const TrainOptions& opt, Gpt& model, int64_t T, const TextCorpus& corpus);

  // With resume: loads the checkpoint into the run (weights, optimizer, scaler, counters) and
  // starts it after the checkpoint's step (from 0 without resume, or when the directory holds
  // no checkpoint yet). With init_from: loads the weights only. Then keeps "the newest
  // checkpoint in dir is this run's": a run without resume refuses a directory
  // that already holds checkpoints (ArgumentError), a resumed one moves those newer than its step
  // to abandoned-step-NNNNNN/. ArgumentError when the checkpoint was made with different
  // trajectory-shaping options (naming the first difference).
  void on_run_start(TrainingRun& run) override;
  // After a step is complete and logged: saves when due. True when the run must stop here
  // (stop_after).
  bool should_stop(TrainingRun& run, const StepRecord& r) override;

 private:
  int64_t restore(TrainingRun& run);
  void prepare_directory(int64_t start) const;
  TrainingState capture(int64_t step, TrainingRun& run) const;
  const TrainOptions& opt_;
  Gpt& model_;
  GptConfig cfg_;
  nlohmann::json run_;  // the options compared on resume
};

// The first key whose value differs between a checkpoint's recorded options and this run's
// ("lr: checkpoint has 0.001, this run has 0.002"), or "" when equal; `prefix` goes before keys.
std::string first_difference(const nlohmann::json& saved, const nlohmann::json& now, const std::string& prefix = "");

// Resuming with a step log: keeps the lines of `path` up to `step` (a torn last line from a
// killed run is dropped), so the resumed run appends to an exact prefix.
void trim_step_log(const std::string& path, int64_t step);

}  // namespace mixtrain
