// The model interface the training engine (train/training_run.h) drives: parameters in a flat
// store, a forward pass from a batch to a loss, its training FLOPs, its configuration as JSON.
// Gpt implements it (models/gpt.h); an encoder with a classification head implements it next.
// Evaluation metrics (loss, top-1 accuracy) come from evaluate_batch.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixtrain/autograd/variable.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/nn/parameters.h"

namespace mixtrain {

// A weight under the name and in the layout of the model's interchange format (for GPT: Hugging
// Face's GPT-2 names and its transposed Conv1D weights); the tensor is a view of the parameter.
// A quantized model's quantized weight has no float tensor: codes and scale instead (views of its
// store's quantized arenas, tensor/quantized.h), codes in the interchange layout, and the scale
// laid out to broadcast against them: (R, 1) for per-row codes, (1, C) when the layout transposes
// them (GPT-2's Conv1D: one scale per output column), as compressed-tensors' weight_scale.
struct NamedWeight {
  std::string name;
  Tensor tensor;  // undefined for a quantized weight
  Tensor codes;   // quantized: the codes (i8 or f8_e4m3) in the interchange layout
  Tensor scale;   // quantized: (R, 1) or (1, C) f32
  bool quantized() const { return codes.defined(); }
};

struct ModelOutput {
  autograd::Var logits;  // the model's output scores
  autograd::Var loss;    // scalar f32 mean loss over the batch's real targets
};

// What evaluation batches score, as sums, so batches combine by adding (TrainingRun divides).
struct EvalSums {
  double loss_sum = 0;  // each batch's mean loss times its real rows
  int64_t rows = 0;     // real rows
  int64_t correct = 0;  // targets whose top-1 prediction (argmax of the logits) is the target
  int64_t scored = 0;   // targets scored (a target of -1 is not)
  void add(const EvalSums& o) {
    loss_sum += o.loss_sum;
    rows += o.rows;
    correct += o.correct;
    scored += o.scored;
  }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string_view family() const = 0;  // "gpt"
  virtual ParameterStore& params() = 0;
  virtual const ParameterStore& params() const = 0;
  // The loss of `batch` (training: dropout on, seeded by dropout_seed).
  virtual ModelOutput forward_batch(const Batch& batch, bool training, uint64_t dropout_seed) = 0;
  // Evaluation metrics of `batch` (no dropout): its loss, and top-1 accuracy over every target
  // that is not -1 (a language model's next-token accuracy, a classifier's accuracy). The default
  // needs logits (..., K) with targets (...): override for a model whose outputs differ.
  virtual EvalSums evaluate_batch(const Batch& batch);
  // Training FLOPs per token at sequence length T (for tokens/s -> FLOP/s and MFU).
  virtual double flops_per_token(int64_t T) const = 0;
  // Keep only each block's input for backward and recompute it there (same gradients).
  virtual void set_activation_checkpointing(bool on) = 0;
  // Training steps compute the LM head and its loss as one chunked op (autograd::lm_head_loss).
  // A model without a language-model head refuses.
  virtual void set_fused_lm_head(bool on) {
    if (on) throw ArgumentError({"fused_lm_head"}, "fused_lm_head: this model has no language-model head");
  }
  // Attention keeps no probabilities for backward: they are made again there from q and k
  // (same gradients bit for bit, one more q k^T and softmax per block). A model whose attention
  // keeps them refuses (the base); the encoders' attention never keeps them and accepts.
  virtual void set_attention_recompute(bool on) {
    if (on)
      throw ArgumentError({"recompute_attention"}, "recompute_attention: this model has no causal attention");
  }
  virtual std::string config_json() const = 0;  // the configuration as JSON text
  // Every weight by name, as checkpoints write them (model.safetensors): views, not copies.
  virtual std::vector<NamedWeight> named_weights() const = 0;
  // The parameters (store names) a quantization scheme stores quantized: the linear layers'
  // weights and the embedding tables; not the layer norms, the biases, nor a classification head.
  // None by default (a model that cannot be quantized).
  virtual std::vector<std::string> quantizable_parameters() const { return {}; }
  // The transformer blocks in order, each its linear layers' module paths: the layers fp8-mixed
  // may run in fp8 (amp/fp8.h). Not the embeddings, the output head nor a classifier. None by
  // default.
  virtual std::vector<std::vector<std::string>> fp8_linears() const { return {}; }
  // Whether its forward gathers its parameters unit by unit when they are sharded over ranks
  // (ZeRO-3, nn/gather.h); a model that does not cannot train with zero 3.
  virtual bool gathers_sharded_parameters() const { return false; }
  int64_t num_parameters() const { return params().numel(); }
};

}  // namespace mixtrain
