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
  static TextClassifier load(const std::string& dir);
  // One prediction per text, in batches of `batch_size`, each cut to max_len tokens (unset: the
  // model's positions; more than those: ArgumentError naming max_len) (at most the
  // model's positions).
  std::vector<Prediction> classify(const std::vector<std::string>& texts,
                                   std::optional<int64_t> max_len = std::nullopt,
                                   int64_t batch_size = 16) const;
  const std::vector<std::string>& labels() const { return labels_; }
  int64_t max_positions() const;  // the longest text in tokens the model takes

 private:
  TextClassifier(std::vector<std::string> labels, WordPieceTokenizer tokenizer, std::unique_ptr<Model> model);
  std::vector<std::string> labels_;
  WordPieceTokenizer tokenizer_;
  std::shared_ptr<Model> model_;  // shared: a TextClassifier is movable and copyable
};

// The WordPiece tokenizer of a model directory: vocab.txt, lower casing as tokenizer_config.json's
// do_lower_case says (BERT's uncased default when it does not). IoError naming a bad file.
WordPieceTokenizer tokenizer_from_model_dir(const std::string& dir);

}  // namespace mixtrain
