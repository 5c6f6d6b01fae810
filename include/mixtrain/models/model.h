// The model interface the training engine (train/training_run.h) drives: parameters in a flat
// store, a forward pass from a batch to a loss, its training FLOPs, its configuration as JSON.
// Gpt implements it (models/gpt.h); an encoder with a classification head implements it next.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "mixtrain/autograd/variable.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/nn/parameters.h"

namespace mixtrain {

struct ModelOutput {
  autograd::Var logits;  // the model's output scores
  autograd::Var loss;    // scalar f32 mean loss over the batch's real targets
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string_view family() const = 0;  // "gpt"
  virtual ParameterStore& params() = 0;
  virtual const ParameterStore& params() const = 0;
  // The loss of `batch` (training: dropout on, seeded by dropout_seed).
  virtual ModelOutput forward_batch(const Batch& batch, bool training, uint64_t dropout_seed) = 0;
  // Training FLOPs per token at sequence length T (for tokens/s -> FLOP/s and MFU).
  virtual double flops_per_token(int64_t T) const = 0;
  // Keep only each block's input for backward and recompute it there (same gradients).
  virtual void set_activation_checkpointing(bool on) = 0;
  virtual nlohmann::json config_json() const = 0;
  int64_t num_parameters() const { return params().numel(); }
};

}  // namespace mixtrain
