// A GPT for inference (fp32 parameters) from whatever a user points at: one checkpoint
// (step-NNNNNN/), a directory of checkpoints (the newest valid one; skipped ones reported), a
// Hugging Face model directory (config.json + model.safetensors, no manifest.json), or a
// bare .safetensors file in GPT-2 layout. A bare file's configuration comes from its
// "mixtrain_config" metadata (files mixtrain wrote), else from a Hugging Face config.json beside
// it (n_head, layer_norm_epsilon; shapes give the rest), else from the shapes and `n_head`.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "mixtrain/models/gpt.h"

namespace mixtrain {

struct InferenceModel {
  std::unique_ptr<Gpt> model;
  std::string source;  // the checkpoint directory or file actually loaded
  int64_t step = -1;   // the checkpoint's step (-1 for a bare file)
  // Weights that are inf or NaN (a diverged run saved them): nothing sensible comes out of such a
  // model, and `mixtrain sample` refuses it.
  int64_t nonfinite_weights = 0;
};

// IoError / ShapeError / DTypeError / ArgumentError (one line naming the file) for anything
// unusable; warn() receives one line per skipped checkpoint.
InferenceModel load_gpt_for_inference(const std::string& path, int64_t n_head,
                                      const std::function<void(const std::string&)>& warn);

// The configuration of what load_gpt_for_inference(path) loads (it loads it to check it: the
// weights must fit the configuration). Errors as there.
GptConfig gpt_config_of(const std::string& path, const std::function<void(const std::string&)>& warn);

// Copies weights into an existing model (any parameter dtype; values rounded to it) from a
// safetensors file, a Hugging Face model directory, a checkpoint or a directory of them (newest
// valid). Returns what was loaded.
// Shapes must match the model (ShapeError naming the tensor); the model is unchanged on error.
std::string load_gpt_weights_into(const std::string& path, Gpt& model,
                                  const std::function<void(const std::string&)>& warn);

// A Hugging Face GPT-2 config.json (n_embd, n_layer, n_head, n_positions, vocab_size,
// layer_norm_epsilon; other keys ignored), each known key type-checked. IoError naming the file.
GptConfig gpt_config_from_hf_json(const std::string& text, const std::string& name);

}  // namespace mixtrain
