// The fine-tune's checkpoints (RunOptions::checkpoint: dir, save_every, keep, resume,
// stop_after) as a hook on its TrainingRun: train()'s CheckpointHook (train/checkpointing.h, the
// same directory layout, manifest and train_state.safetensors) with the encoder's weights under
// their Hugging Face names in model.safetensors. The state records the encoder's configuration
// (TrainingState::model, as for every model: Model::config_json()) and the recorded run options
// the data's checksum, so resuming with another model, data set or trajectory-shaping option is
// refused.
// A resumed run with the same options and thread count continues bit for bit.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"
#include "train/checkpointing.h"

namespace mixtrain {

// The running sums of the epoch in progress (its train_loss is their mean), kept in a checkpoint
// so that a resumed epoch's mean covers the steps before the resume too.
struct EpochSums {
  double loss_sum = 0;
  int64_t steps = 0;
};

class FinetuneCheckpointing final : public CheckpointHook {
 public:
  // opt: the run's shared options (checkpoint, seed, quiet, ...); run_options: everything else
  // that shapes the trajectory (model config, data checksum, max_len, epochs, ...), compared on
  // resume together with the optimizer, precision and scaler options of `opt`.
  // epoch: the EpochSums the run's epoch hook adds to (saved and restored with the checkpoint).
  FinetuneCheckpointing(const RunOptions& opt, nlohmann::json run_options, EpochSums& epoch);

 private:
  std::vector<uint8_t> weights_file(TrainingRun& run) const override;
  nlohmann::json manifest_model(TrainingRun& run) const override;
  nlohmann::json task_state() const override;
  void restore_task_state(const nlohmann::json& state) override;
  EpochSums& epoch_;
};

}  // namespace mixtrain
