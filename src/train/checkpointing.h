// Checkpoints (RunOptions::checkpoint: dir, save_every, keep, resume, stop_after, init_from) as
// a hook on the TrainingRun (train/training_run.h): it restores when the run starts and saves (or
// stops the run) after each step. CheckpointHook is the shared part, TrainCheckpointing train()'s
// (FinetuneCheckpointing, train/finetune_checkpointing.h, the fine-tune's).
//
// A checkpoint (checkpoint/checkpoint_dir.h) holds model.safetensors (checkpoint/gpt_weights.h:
// the weights under their Hugging Face names) and train_state.safetensors
// (checkpoint/training_state.h: master weights, optimizer state, scaler, counters, RNG
// positions). A resumed run with the same options and thread count continues bit for bit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/training_state.h"
#include "mixtrain/train/train_options.h"  // TrainOptions, CheckpointOptions
#include "mixtrain/train/training_run.h"

namespace mixtrain {

class TextCorpus;

// fp8-mixed's options in a checkpoint's run options (compared on resume): recipe, format, the
// delayed recipe's history length, reduction and margin, the layers kept in bf16.
nlohmann::json fp8_run_options(const Fp8Config& c);

// Whether a checkpoint is written after `step` of a run whose last step is `last`: checkpoint.dir
// is set and the step is the last, stop_after's, one that ends an interrupted run, or a multiple
// of save_every.
bool checkpoint_due(const CheckpointOptions& c, int64_t step, int64_t last, bool interrupted);

// The part a rank other than 0 takes in rank 0's checkpoints under ZeRO (optim/zero.h): at every
// step a checkpoint is due (by the options rank 0 saves with), it joins the gather of the
// optimizer state that rank 0's capture starts (Optimizer::state(), a collective there).
class ZeroCheckpointGatherHook final : public TrainingHook {
 public:
  explicit ZeroCheckpointGatherHook(CheckpointOptions c) : c_(std::move(c)) {}
  bool should_stop(TrainingRun& run, const StepRecord& r) override;

 private:
  CheckpointOptions c_;
};

// The checkpoint hook of any TrainingRun (train() and finetune() derive from it): restores when the
// run starts, saves (or stops the run) after each step. The state keeps the model's configuration
// (Model::config_json()), compared on resume for any model. The subclasses say only what differs
// between the models: the model files and the manifest's model entry, and what a run without
// resume starts from.
class CheckpointHook : public TrainingHook {
 public:
  // With resume: loads the checkpoint into the run (weights, optimizer, scaler, counters) and
  // starts it after the checkpoint's step (from 0 without resume, or when the directory holds
  // no checkpoint yet; without resume, start_fresh() runs first). Then keeps "the newest
  // checkpoint in dir is this run's": a run without resume refuses a directory that already
  // holds checkpoints (ArgumentError), a resumed one moves those newer than its step to
  // abandoned-step-NNNNNN/. ArgumentError when the checkpoint was made with a different model or
  // different trajectory-shaping options (naming the first difference), or is past the run's
  // last step (RunConfig::steps).
  void on_run_start(TrainingRun& run) final;
  // After a step is complete and logged: saves when due (save_every, the last step, stop_after,
  // an interrupt). True when the run must stop here (stop_after).
  bool should_stop(TrainingRun& run, const StepRecord& r) final;

 protected:
  // opt: the run's options (under data parallelism as one process would make the run: grad_accum
  // times the ranks); run_options: the options compared on resume (recorded in the state);
  // last_step_words: how the error of a checkpoint past the last step names that step
  // ("steps" where it is the --steps option).
  CheckpointHook(const RunOptions& opt, nlohmann::json run_options, std::string last_step_words);
  const RunOptions opt_;  // a copy (callers pass as_one_process(...) temporaries)

 private:
  // What differs between the models. model.safetensors' bytes:
  virtual std::vector<uint8_t> weights_file(TrainingRun& run) const = 0;
  // Files written after model.safetensors and train_state.safetensors (none by default).
  virtual std::vector<CheckpointFile> extra_files() const { return {}; }
  // The manifest's "model" entry.
  virtual nlohmann::json manifest_model(TrainingRun& run) const = 0;
  // A run without resume, before the directory is prepared (GPT: the weights of init_from).
  virtual void start_fresh() {}
  // The task's own state at the step (the manifest's "task_state"; null: none), and its restore
  // from a checkpoint's (null for one saved without it).
  virtual nlohmann::json task_state() const { return nullptr; }
  virtual void restore_task_state(const nlohmann::json&) {}

  int64_t restore(TrainingRun& run);
  void prepare_directory(int64_t start) const;
  TrainingState capture(int64_t step, TrainingRun& run) const;
  nlohmann::json run_;  // the options compared on resume
  std::string last_step_words_;
};

// train()'s checkpoints: model.safetensors in GPT-2's Hugging Face layout (the config in its
// metadata) and Hugging Face's config.json.
class TrainCheckpointing final : public CheckpointHook {
 public:
  // model: the run's model; T: the sequence length in use; corpus: the training data (its
  // checksum is part of the run). With init_from and no resume: loads the weights only. A run with
  // a tokenizer: each checkpoint carries tokenizer_files, its vocab.json and merges.txt.
  TrainCheckpointing(const TrainOptions& opt, Gpt& model, int64_t T, const TextCorpus& corpus,
                     std::vector<CheckpointFile> tokenizer_files = {});

 private:
  std::vector<uint8_t> weights_file(TrainingRun& run) const override;
  std::vector<CheckpointFile> extra_files() const override;
  nlohmann::json manifest_model(TrainingRun& run) const override;
  void start_fresh() override;
  Gpt& model_;
  GptConfig cfg_;
  std::vector<CheckpointFile> extra_files_;  // config.json, and a tokenizer run's vocab.json, merges.txt
};

// JSON has no inf / NaN: those go in as strings, so two option sets still compare equal.
nlohmann::json json_number(double v);

// The first key whose value differs between a checkpoint's recorded options and this run's
// ("lr: checkpoint has 0.001, this run has 0.002"), or "" when equal; `prefix` goes before keys.
std::string first_difference(const nlohmann::json& saved, const nlohmann::json& now,
                             const std::string& prefix = "");

// Resuming with a step log: keeps the lines of `path` up to `step` (a torn last line from a
// killed run is dropped), so the resumed run appends to an exact prefix.
void trim_step_log(const std::string& path, int64_t step);
// The same for a numerics log (train/numerics_hook.h): keeps its records of steps <= `step`.
void trim_numerics_log(const std::string& path, int64_t step);

}  // namespace mixtrain
