// TextClassifier: a saved fine-tuned encoder applied to texts (train/classify.h).
#include "mixtrain/train/classify.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file_io.h"
#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/variable.h"
#include "mixtrain/core/error.h"
#include "mixtrain/models/encoder.h"

namespace mixtrain {
namespace fs = std::filesystem;

WordPieceTokenizer tokenizer_from_model_dir(const std::string& dir) {
  WordPieceTokenizer::Options opt;
  const fs::path config = fs::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config, ec)) {
    // Bounded and depth-limited, as every JSON read from a model directory.
    const std::vector<uint8_t> bytes = read_file_bounded(config.string(), 1 << 20, "tokenizer config");
    const nlohmann::json j = parse_untrusted_json(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), config.string());
    if (j.is_object() && j.contains("do_lower_case") && j["do_lower_case"].is_boolean())
      opt.lower_case = j["do_lower_case"].get<bool>();
  }
  return WordPieceTokenizer::from_vocab_file((fs::path(dir) / "vocab.txt").string(), opt);
}

TextClassifier::TextClassifier(std::vector<std::string> labels, WordPieceTokenizer tokenizer,
                               std::unique_ptr<Model> model, DType compute)
    : labels_(std::move(labels)),
      compute_(compute),
      tokenizer_(std::move(tokenizer)),
      model_(std::move(model)) {}

TextClassifier TextClassifier::load(const std::string& dir, std::optional<DType> compute) {
  if (compute && *compute != DType::f32 && *compute != DType::bf16)
    throw ArgumentError({"compute"}, "compute must be f32 or bf16, got " + std::string(dtype_name(*compute)));
  if (!fs::is_directory(dir))
    throw IoError("model directory " + dir + " does not exist or is not a directory");
  ClassifierOptions co = saved_classifier_options(dir);  // labels from id2label, the saved pooling
  if (co.labels.size() < 2)
    throw IoError(dir +
                  "/config.json: no id2label with at least 2 labels (not a model saved by finetune --save)");
  // A label is printed as a field of classify's text output: no control character (a tab or a
  // newline in one would forge fields or lines), no two alike (a prediction must say one class).
  std::set<std::string> seen;
  for (size_t i = 0; i < co.labels.size(); ++i) {
    const std::string& l = co.labels[i];
    if (l.empty() ||
        std::any_of(l.begin(), l.end(), [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; }))
      throw IoError(dir + "/config.json: id2label " + std::to_string(i) + " '" + printable(l) +
                    "' is empty or holds a control character (tab, newline, escape)");
    if (!seen.insert(l).second)
      throw IoError(dir + "/config.json: id2label names '" + printable(l) + "' twice");
  }
  WordPieceTokenizer tok = tokenizer_from_model_dir(dir);
  std::vector<std::string> labels = co.labels;
  const bool quantized = is_quantized_model_dir(dir);
  const DType dt = compute.value_or(quantized ? DType::bf16 : DType::f32);
  std::unique_ptr<Model> model =
      load_encoder_classifier(dir, co, dt, DType::f32, MemCategory::parameters, /*gradients=*/false);
  return TextClassifier(std::move(labels), std::move(tok), std::move(model), dt);
}

int64_t TextClassifier::max_positions() const { return encoder_info(*model_).max_positions; }

Batch TextClassifier::batch(const std::vector<Encoding>& encodings) const {
  const EncodedBatch e = tokenizer_.pad(encodings);
  Batch b;
  b.inputs = Tensor::from_ints(e.input_ids, {e.B, e.T});                       // (B, T)
  b.token_types = Tensor::from_ints(e.token_type_ids, {e.B, e.T});             // (B, T)
  b.attention_mask = Tensor::from_ints(e.attention_mask, {e.B, e.T});          // (B, T)
  b.targets = Tensor::from_ints(std::vector<int32_t>(size_t(e.B), 0), {e.B});  // (B): unused
  b.rows = e.B;
  return b;
}

std::vector<float> TextClassifier::logits(const Batch& batch) const {
  const autograd::NoGradGuard no_grad;
  const AutocastScope autocast(compute_ != DType::f32, DType::bf16);
  return model_->forward_batch(batch, false, 0).logits.value().to_floats();
}

std::vector<Prediction> TextClassifier::classify(const std::vector<std::string>& texts,
                                                 std::optional<int64_t> max_len_opt,
                                                 int64_t batch_size) const {
  const int64_t positions = max_positions();
  const int64_t max_len = max_len_opt.value_or(positions);
  if (max_len < 2)
    throw ArgumentError({"max_len"}, "max_len must be at least 2, got " + std::to_string(max_len));
  if (batch_size < 1)
    throw ArgumentError("classify: batch_size must be positive, got " + std::to_string(batch_size));
  if (max_len > positions)
    throw ArgumentError({"max_len"}, "max_len " + std::to_string(max_len) + " exceeds the model's " +
                                         std::to_string(positions) + " positions");
  std::vector<Prediction> out;
  const autograd::NoGradGuard no_grad;
  const int64_t K = int64_t(labels_.size());
  for (size_t first = 0; first < texts.size(); first += size_t(batch_size)) {
    const size_t end = std::min(texts.size(), first + size_t(batch_size));
    std::vector<Encoding> enc;
    for (size_t i = first; i < end; ++i) enc.push_back(tokenizer_.encode(texts[i], max_len));
    const Batch b = batch(enc);
    const std::vector<float> logits = this->logits(b);  // (B, K)
    for (int64_t r = 0; r < b.rows; ++r) {
      const float* z = logits.data() + r * K;
      const float top = *std::max_element(z, z + K);
      Prediction p;
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += std::exp(double(z[k]) - top);
      for (int64_t k = 0; k < K; ++k) p.probabilities.push_back(std::exp(double(z[k]) - top) / sum);
      p.label = labels_[size_t(std::max_element(z, z + K) - z)];
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace mixtrain
