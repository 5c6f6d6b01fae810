// Classifying texts with a fine-tuned encoder saved by `mixtrain finetune --save DIR`
// (save_encoder_classifier: config.json with id2label, model.safetensors, the tokenizer files).
//
//   TextClassifier c = TextClassifier::load("out/model");
//   for (const Prediction& p : c.classify({"great coffee", "stale and bitter"})) p.label, p.probabilities
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixtrain/data/wordpiece.h"
#include "mixtrain/models/encoder.h"
#include "mixtrain/models/model.h"

namespace mixtrain {

struct Prediction {
  std::string label;                  // the most probable class
  std::vector<double> probabilities;  // softmax of the logits, in class-id order (labels())
};

class TextClassifier {
 public:
  // IoError naming the file for a directory without config.json / id2label / vocab.txt / weights.
  // compute: the dtype inference runs in: f32 (fp32 parameters, no autocast) or bf16 (bf16
  // parameters under bf16 autocast: GEMMs in bf16, layer norm and softmax in fp32, as bf16
  // inference in PyTorch). Unset: bf16 for a quantized directory (`mixtrain quantize`: its
  // quantized layers run as its scheme says, the rest as bf16 inference), f32 otherwise. The
  // model has no gradient buffers.
  static TextClassifier load(const std::string& dir, std::optional<DType> compute = std::nullopt);
  // One prediction per text, in batches of `batch_size`, each cut to max_len tokens (unset: the
  // model's positions; more than those: ArgumentError naming max_len) (at most the
  // model's positions).
  std::vector<Prediction> classify(const std::vector<std::string>& texts,
                                   std::optional<int64_t> max_len = std::nullopt,
                                   int64_t batch_size = 16) const;
  const std::vector<std::string>& labels() const { return labels_; }
  int64_t max_positions() const;  // the longest text in tokens the model takes
  DType compute_dtype() const { return compute_; }
  QuantScheme quant_scheme() const { return model_->params().quant_scheme(); }
  const Model& model() const { return *model_; }
  const WordPieceTokenizer& tokenizer() const { return tokenizer_; }
  // The classification Batch of these encodings (the tokenizer's, padded to the longest; targets
  // unused), as classify() builds it.
  Batch batch(const std::vector<Encoding>& encodings) const;
  // The logits (B, K) f32 of one batch (data/data_source.h's classification Batch), computed as
  // classify() computes them (no gradients, the compute dtype's autocast).
  std::vector<float> logits(const Batch& batch) const;

 private:
  TextClassifier(std::vector<std::string> labels, WordPieceTokenizer tokenizer, std::unique_ptr<Model> model,
                 DType compute);
  std::vector<std::string> labels_;
  DType compute_ = DType::f32;
  WordPieceTokenizer tokenizer_;
  std::shared_ptr<Model> model_;  // shared: a TextClassifier is movable and copyable
};

// The WordPiece tokenizer of a model directory: vocab.txt, lower casing as tokenizer_config.json's
// do_lower_case says (BERT's uncased default when it does not). IoError naming a bad file.
WordPieceTokenizer tokenizer_from_model_dir(const std::string& dir);

}  // namespace mixtrain
