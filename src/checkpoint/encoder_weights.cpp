// load_encoder_classifier / save_encoder_classifier (models/encoder.h): a Hugging Face model
// directory (config.json + model.safetensors) <-> EncoderClassifier. Names are matched with or
// without the model prefix ("bert." / "distilbert."), so a bare encoder (all-MiniLM-L6-v2's
// "embeddings.word_embeddings.weight") and a *ForSequenceClassification both load; head tensors
// the file lacks keep the seeded initialisation.
#include <filesystem>
#include <map>

#include "checkpoint/file_io.h"
#include "checkpoint/json_input.h"
#include "checkpoint/safetensors.h"
#include "mixtrain/core/error.h"
#include "mixtrain/models/encoder.h"
#include "models/encoder_model.h"

namespace mixtrain {
namespace fs = std::filesystem;

namespace {

bool starts_with(const std::string& s, const std::string& head) { return s.rfind(head, 0) == 0; }
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + ")";
}

// Tensors a checkpoint may carry that are not parameters of the classifier: buffers
// (position_ids), pre-training heads (BERT's cls.*, DistilBERT's vocab_*).
bool ignorable(const std::string& name) {
  return ends_with(name, "position_ids") || starts_with(name, "cls.") || starts_with(name, "vocab_transform.") ||
         starts_with(name, "vocab_layer_norm.") || starts_with(name, "vocab_projector.");
}

void load_weights(const SafetensorsFile& file, EncoderClassifier& model, const std::string& prefix) {
  const std::string where = "safetensors file " + file.name();
  // File names with the model prefix stripped -> entry.
  std::map<std::string, const SafetensorsEntry*> by_name;
  bool has_pooler = false;  // mean pooling declares none: then a file's pooler is left unread
  for (const NamedWeight& w : model.named_weights()) has_pooler = has_pooler || starts_with(w.name, "bert.pooler.");
  for (const auto& e : file.entries()) {
    const std::string n = starts_with(e.name, prefix + ".") ? e.name.substr(prefix.size() + 1) : e.name;
    if (ignorable(n) || (!has_pooler && starts_with(n, "pooler."))) continue;
    if (!by_name.emplace(n, &e).second)
      throw IoError(where + ": tensor '" + printable(n) + "' appears both with and without the '" + prefix + ".' prefix");
  }
  const ParameterStore& store = model.params();
  // Convert everything first, then copy: the model stays as it was if any tensor is bad.
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination view, source)
  for (const NamedWeight& w : model.named_weights()) {
    const std::string n = starts_with(w.name, prefix + ".") ? w.name.substr(prefix.size() + 1) : w.name;
    const auto it = by_name.find(n);
    if (it == by_name.end()) {
      if (EncoderClassifier::is_head(w.name)) continue;  // a bare encoder: the head stays initialised
      throw IoError(where + ": missing tensor '" + w.name + "'");
    }
    const SafetensorsEntry& e = *it->second;
    DType t{};
    if (!dtype_from_safetensors(e.dtype, t) || !is_floating(t))
      throw DTypeError(where + ": tensor '" + printable(e.name) + "' has dtype " + e.dtype + ", expected a float type");
    const std::vector<int64_t> want(w.tensor.shape().begin(), w.tensor.shape().end());
    if (e.shape != want)
      throw ShapeError(where + ": tensor '" + printable(e.name) + "' has shape " + shape_text(e.shape) + ", expected " +
                       shape_text(want) + " for this model (labels, config.json)");
    copies.emplace_back(w.tensor, file.tensor(e, MemCategory::workspace));
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw IoError(where + ": unexpected tensor '" + printable(by_name.begin()->second->name) + "' for this model");
  for (auto& [dst, src] : copies) dst.copy_from(src);
  store.flat_params().storage()->bump_version();
}

}  // namespace

std::unique_ptr<Model> load_encoder_classifier(const std::string& dir, const ClassifierOptions& options, DType dtype,
                                               DType grad_dtype, MemCategory param_category) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::vector<uint8_t> text = read_file_bounded(config_path, 1 << 20, "config");
  const nlohmann::json j = parse_untrusted_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                                                "config " + config_path);
  EncoderConfig cfg;
  try {
    cfg = EncoderConfig::from_hf_json(j, "config " + config_path);
  } catch (const ArgumentError& e) {
    throw IoError(e.what());
  }
  auto model = std::make_unique<EncoderClassifier>(cfg, options, dtype, grad_dtype, param_category);
  const std::string weights = (fs::path(dir) / "model.safetensors").string();
  // On the meta device too: the file's tensors are then meta workspace tensors, so a memory
  // prediction counts the load's buffers as the real load holds them.
  load_weights(SafetensorsFile::read(weights), *model, cfg.family == EncoderFamily::bert ? "bert" : "distilbert");
  return model;
}

void save_encoder_classifier(const Model& model, const std::string& dir, const std::string& tokenizer_dir) {
  const auto* enc = dynamic_cast<const EncoderClassifier*>(&model);
  if (!enc) throw ArgumentError("save_encoder_classifier: model family '" + std::string(model.family()) +
                                "' is not an encoder classifier");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
  SafetensorsWriter w;
  for (const NamedWeight& n : enc->named_weights()) w.add(n.name, n.tensor);
  w.set_metadata("format", "pt");
  w.write((fs::path(dir) / "model.safetensors").string());
  write_file_durable((fs::path(dir) / "config.json").string(), enc->config_json() + "\n");
  for (const char* f : {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path src = fs::path(tokenizer_dir) / f;
    if (tokenizer_dir.empty() || !fs::is_regular_file(src)) continue;
    const std::vector<uint8_t> b = read_file_bounded(src.string(), uint64_t{64} << 20, "tokenizer file");
    write_file_durable((fs::path(dir) / f).string(), b.data(), b.size());
  }
}

}  // namespace mixtrain
