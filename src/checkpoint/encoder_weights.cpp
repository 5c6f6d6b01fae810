// load_encoder_classifier / save_encoder_classifier (models/encoder.h): a Hugging Face model
// directory (config.json + model.safetensors) <-> EncoderClassifier. Names are matched with or
// without the model prefix ("bert." / "distilbert."), so a bare encoder (all-MiniLM-L6-v2's
// "embeddings.word_embeddings.weight") and a *ForSequenceClassification both load; head tensors
// the file lacks keep the seeded initialisation.
#include <filesystem>
#include <map>

#include "checkpoint/quantized_io.h"
#include "checkpoint/safetensors.h"
#include "core/file_io.h"
#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/core/error.h"
#include "mixtrain/models/encoder.h"
#include "models/encoder_model.h"

namespace mixtrain {
namespace fs = std::filesystem;

namespace {

// Tensors a checkpoint may carry that are not parameters of the classifier: buffers
// (position_ids), pre-training heads (BERT's cls.*, DistilBERT's vocab_*).
bool ignorable(const std::string& name) {
  return name.ends_with("position_ids") || name.starts_with("cls.") || name.starts_with("vocab_transform.") ||
         name.starts_with("vocab_layer_norm.") || name.starts_with("vocab_projector.");
}

void load_weights(const SafetensorsFile& file, EncoderClassifier& model, const std::string& prefix) {
  const std::string where = "safetensors file " + file.name();
  // File names with the model prefix stripped -> entry.
  std::map<std::string, const SafetensorsEntry*> by_name;
  bool has_pooler = false;  // mean pooling declares none: then a file's pooler is left unread
  for (const NamedWeight& w : model.named_weights())
    has_pooler = has_pooler || w.name.starts_with("bert.pooler.");
  for (const auto& e : file.entries()) {
    const std::string n = e.name.starts_with(prefix + ".") ? e.name.substr(prefix.size() + 1) : e.name;
    if (ignorable(n) || (!has_pooler && n.starts_with("pooler."))) continue;
    if (!by_name.emplace(n, &e).second)
      throw IoError(where + ": tensor '" + printable(n) + "' appears both with and without the '" + prefix +
                    ".' prefix");
  }
  const ParameterStore& store = model.params();
  // Convert everything first, then copy: the model stays as it was if any tensor is bad.
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination view, source)
  for (const NamedWeight& w : model.named_weights()) {
    const std::string n = w.name.starts_with(prefix + ".") ? w.name.substr(prefix.size() + 1) : w.name;
    const auto it = by_name.find(n);
    if (it == by_name.end()) {
      if (EncoderClassifier::is_head(w.name)) continue;  // a bare encoder: the head stays initialised
      throw IoError(where + ": missing tensor '" + w.name + "'");
    }
    if (w.quantized()) {
      take_quantized(file, by_name, n, w, copies);
      continue;
    }
    const SafetensorsEntry& e = *it->second;
    DType t{};
    if (!dtype_from_safetensors(e.dtype, t) || !is_floating(t))
      throw DTypeError(where + ": tensor '" + printable(e.name) + "' has dtype " + e.dtype +
                       ", expected a float type");
    const std::vector<int64_t> want(w.tensor.shape().begin(), w.tensor.shape().end());
    if (e.shape != want)
      throw ShapeError(where + ": tensor '" + printable(e.name) + "' has shape " + shape_text(e.shape) +
                       ", expected " + shape_text(want) + " for this model (labels, config.json)");
    copies.emplace_back(w.tensor, file.tensor(e, MemCategory::workspace));
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw IoError(where + ": unexpected tensor '" + printable(by_name.begin()->second->name) +
                  "' for this model");
  for (auto& [dst, src] : copies) dst.copy_from(src);
  store.mark_written();
}

}  // namespace

namespace {
nlohmann::json read_config(const std::string& dir, std::string& path) {
  path = (fs::path(dir) / "config.json").string();
  const std::vector<uint8_t> text = read_file_bounded(path, 1 << 20, "config");
  return parse_untrusted_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                              "config " + path);
}
}  // namespace

bool is_quantized_model_dir(const std::string& dir) {
  std::string path;
  const nlohmann::json j = read_config(dir, path);
  return quantization_scheme_of(j, "config " + path) != QuantScheme::none;
}

ClassifierOptions saved_classifier_options(const std::string& dir) {
  std::string path;
  const nlohmann::json j = read_config(dir, path);
  ClassifierOptions o;
  if (!j.is_object()) throw IoError("config " + path + ": not a JSON object");
  const auto labels = j.find("id2label");
  if (labels != j.end()) {
    if (!labels->is_object() || labels->size() > (size_t{1} << 20))
      throw IoError("config " + path + ": 'id2label' must be an object of class id -> label");
    o.labels.resize(labels->size());
    for (auto& [key, value] : labels->items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
      }
      if (used != key.size() || id < 0 || id >= static_cast<long long>(o.labels.size()) ||
          !value.is_string() || !o.labels[static_cast<size_t>(id)].empty())
        throw IoError("config " + path + ": 'id2label' must map each of \"0\"..\"" +
                      std::to_string(o.labels.size() - 1) + "\" once to a label string (bad key '" +
                      printable(key) + "')");
      o.labels[static_cast<size_t>(id)] = value.get<std::string>();
    }
  }
  const auto pooling = j.find("mixtrain_pooling");
  if (pooling != j.end()) {
    if (*pooling == "mean")
      o.pooling = Pooling::mean;
    else if (*pooling != "cls")
      throw IoError("config " + path + ": 'mixtrain_pooling' must be \"cls\" or \"mean\"");
  }
  return o;
}

std::unique_ptr<Model> load_encoder_classifier(const std::string& dir, const ClassifierOptions& options,
                                               DType dtype, DType grad_dtype, MemCategory param_category,
                                               bool gradients) {
  std::string config_path;
  const nlohmann::json j = read_config(dir, config_path);
  StoreOptions storage;
  storage.gradients = gradients;
  storage.quant = quantization_scheme_of(j, "config " + config_path);
  if (storage.quant != QuantScheme::none && gradients)
    throw IoError(
        dir + " holds a quantized model (" + std::string(quant_scheme_name(storage.quant)) +
        "): it is for inference (classify, evaluate); train or fine-tune the model it was quantized from");
  EncoderConfig cfg;
  try {
    cfg = EncoderConfig::from_hf_json(j, "config " + config_path);
  } catch (const ArgumentError& e) {
    throw IoError(e.what());
  }
  // On the meta device too (memory prediction): the file is read on the host and its tensors
  // become meta workspace tensors (SafetensorsFile::tensor), so the prediction counts the load's
  // buffers as the real load holds them, and nothing is computed.
  // The file first: a config.json describing far more parameters than model.safetensors holds is
  // refused before anything that large is allocated.
  const SafetensorsFile file = SafetensorsFile::read((fs::path(dir) / "model.safetensors").string());
  double held = 0;
  for (const SafetensorsEntry& e : file.entries()) held += static_cast<double>(e.numel);
  // Twice the file plus 1M elements: a config off by a layer or a size still gets the precise
  // per-tensor error below; one asking for far more memory than the file justifies does not.
  if (cfg.encoder_parameters() > 2 * held + double(1 << 20))
    throw IoError("config " + config_path + " describes " +
                  std::to_string(static_cast<int64_t>(cfg.encoder_parameters())) +
                  " encoder parameters but " + file.name() + " holds only " +
                  std::to_string(static_cast<int64_t>(held)) + " elements");
  auto model = std::make_unique<EncoderClassifier>(cfg, options, dtype, grad_dtype, param_category, storage);
  load_weights(file, *model, cfg.family == EncoderFamily::bert ? "bert" : "distilbert");
  return model;
}

void save_encoder_classifier(const Model& model, const std::string& dir, const std::string& tokenizer_dir) {
  const auto* enc = dynamic_cast<const EncoderClassifier*>(&model);
  if (!enc)
    throw ArgumentError("save_encoder_classifier: model family '" + std::string(model.family()) +
                        "' is not an encoder classifier");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
  SafetensorsWriter w;
  add_named_weights(w, enc->named_weights());
  w.set_metadata("format", "pt");
  w.write((fs::path(dir) / "model.safetensors").string());
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(enc->config_json());
  if (enc->params().any_quantized())
    config["quantization_config"] = quantization_config_json(
        enc->params().quant_scheme(), {"classifier", "pre_classifier", "bert.pooler.dense"});
  write_file_durable((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  copy_present_files(tokenizer_dir, dir,
                     {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"},
                     uint64_t{64} << 20, "tokenizer file");
}

}  // namespace mixtrain
