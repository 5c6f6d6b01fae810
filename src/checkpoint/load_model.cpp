// Loading a GPT for inference from a checkpoint, a directory of them, or a safetensors file.
#include "mixtrain/checkpoint/load_model.h"

#include <algorithm>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/gpt_weights.h"
#include "checkpoint/quantized_io.h"
#include "core/file_io.h"
#include "core/json_input.h"
#include "kernels/numeric_stats.h"
#include "mixtrain/core/error.h"
#include "models/gpt_config_json.h"

namespace fs = std::filesystem;

namespace mixtrain {
namespace {

// The parameters a config describes (embeddings, L blocks of 12 C^2 + 13 C, the final norm; the
// output head is tied), in double: a hostile config's sizes must not overflow.
double gpt_parameters(const GptConfig& c) {
  const double C = double(c.n_embd);
  return double(c.vocab_size) * C + double(c.block_size) * C + double(c.n_layer) * (12 * C * C + 13 * C) +
         2 * C;
}

std::unique_ptr<Gpt> build_and_load(const GptConfig& cfg, const SafetensorsFile& f, const std::string& where,
                                    QuantScheme quant = QuantScheme::none) {
  // The config is checked against the weights before the model is allocated: sizes that no file
  // holds (a hostile or mistaken config) are an error naming both, not an allocation that fails.
  double values = 0;
  for (const SafetensorsEntry& e : f.entries()) values += double(e.numel);
  if (gpt_parameters(cfg) > values)
    throw IoError(where + ": the weights hold " + std::to_string(int64_t(values)) +
                  " values, fewer than the " + std::to_string(int64_t(std::min(gpt_parameters(cfg), 9e18))) +
                  " parameters expected by its model config (" + std::to_string(cfg.n_layer) +
                  " layers, n_embd " + std::to_string(cfg.n_embd) + ", vocab_size " +
                  std::to_string(cfg.vocab_size) + ", block_size " + std::to_string(cfg.block_size) + ")");
  // A quantized file (`mixtrain quantize`): its codes and scales, the rest in bf16, no gradients.
  StoreOptions storage;
  storage.quant = quant;
  storage.gradients = quant == QuantScheme::none;
  auto model = std::make_unique<Gpt>(cfg, 0, quant == QuantScheme::none ? DType::f32 : DType::bf16,
                                     DType::f32, MemCategory::parameters, storage);
  load_gpt_safetensors(f, *model);
  return model;
}

GptConfig config_from_json_text(const std::string& text, const std::string& where) {
  const nlohmann::json j = parse_untrusted_json(text, where);
  try {
    return gpt_config_from_json(j, where);
  } catch (const ArgumentError& e) {
    throw IoError(e.what());
  }
}

// A model directory (model.safetensors, and no manifest.json: not a checkpoint): a Hugging Face
// model's, or a quantized one's. Its model.safetensors, else "".
std::string model_dir_file(const std::string& path) {
  std::error_code ec;
  const fs::path file = fs::path(path) / "model.safetensors";
  if (fs::is_directory(path, ec) && fs::is_regular_file(file, ec) &&
      !fs::exists(fs::path(path) / "manifest.json", ec))
    return file.string();
  return "";
}

}  // namespace

GptConfig gpt_config_from_hf_json(const std::string& text, const std::string& name) {
  const nlohmann::json j = parse_untrusted_json(text, "config " + name);
  if (!j.is_object()) throw IoError("config " + name + " is not a JSON object");
  GptConfig c;
  c.name = name;
  const std::pair<const char*, int64_t*> ints[] = {{"n_embd", &c.n_embd},
                                                   {"n_layer", &c.n_layer},
                                                   {"n_head", &c.n_head},
                                                   {"n_positions", &c.block_size},
                                                   {"vocab_size", &c.vocab_size}};
  for (const auto& [key, field] : ints) {
    if (!j.contains(key)) throw IoError("config " + name + ": '" + key + "' is missing");
    const auto& v = j[key];
    if (!v.is_number_integer()) throw IoError("config " + name + ": '" + key + "' must be an integer");
    *field = v.get<int64_t>();
  }
  if (j.contains("layer_norm_epsilon")) {
    if (!j["layer_norm_epsilon"].is_number())
      throw IoError("config " + name + ": 'layer_norm_epsilon' must be a number");
    c.ln_eps = j["layer_norm_epsilon"].get<float>();
  }
  try {
    c.validate();
  } catch (const ArgumentError& e) {
    throw IoError(e.what());
  }
  return c;
}

InferenceModel load_gpt_for_inference(const std::string& path, int64_t n_head,
                                      const std::function<void(const std::string&)>& warn) {
  InferenceModel out;
  std::error_code ec;
  auto n_head_unused = [&](const std::string& from) {
    if (n_head > 0 && warn)
      warn("n_head " + std::to_string(n_head) + " has no effect: the configuration comes from " + from);
  };
  // A quantized model directory (`mixtrain quantize --output`): its model.safetensors, configured
  // by its metadata and config.json.
  const fs::path as_dir_file = fs::path(path) / "model.safetensors";
  const fs::path dir_config = fs::path(path) / "config.json";
  if (fs::is_directory(path, ec) && fs::is_regular_file(as_dir_file, ec) &&
      fs::is_regular_file(dir_config, ec)) {
    const std::vector<uint8_t> b = read_file_bounded(dir_config.string(), 1 << 20, "config");
    const nlohmann::json j = parse_untrusted_json(
        std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), dir_config.string());
    // A quantized model directory, or a Hugging Face model directory (no manifest: not a checkpoint).
    if (quantization_scheme_of(j, "config " + dir_config.string()) != QuantScheme::none ||
        !model_dir_file(path).empty())
      return load_gpt_for_inference(as_dir_file.string(), n_head, warn);
  }
  if (fs::is_regular_file(path, ec)) {
    const SafetensorsFile f = SafetensorsFile::read(path);
    QuantScheme quant = QuantScheme::none;
    if (const auto q = f.metadata().find("mixtrain_quant_scheme"); q != f.metadata().end()) {
      try {
        quant = parse_quant_scheme(q->second);
      } catch (const ArgumentError& e) {
        throw IoError("safetensors file " + path + " mixtrain_quant_scheme: " + e.what());
      }
    }
    GptConfig cfg;
    const auto meta = f.metadata().find("mixtrain_config");
    const fs::path hf_config = fs::path(path).parent_path() / "config.json";
    if (meta != f.metadata().end())
      n_head_unused(path + " (mixtrain_config)");
    else if (fs::exists(hf_config, ec))
      n_head_unused(hf_config.string());
    if (meta != f.metadata().end()) {
      cfg = config_from_json_text(meta->second, "safetensors file " + path + " mixtrain_config");
    } else if (fs::exists(hf_config, ec)) {
      const std::vector<uint8_t> b = read_file_bounded(hf_config.string(), 1 << 20, "config");
      cfg = gpt_config_from_hf_json(std::string(b.begin(), b.end()), hf_config.string());
    } else {
      if (n_head <= 0)
        throw ArgumentError({"n_head"},
                            "safetensors file " + path +
                                " carries no configuration: give n_head (or a config.json beside it)");
      cfg = infer_gpt_config(f, n_head);
    }
    out.model = build_and_load(cfg, f, path, quant);
    out.source = path;
    out.nonfinite_weights = numeric_stats(out.model->params().flat_params()).nonfinite;
    return out;
  }
  // A checkpoint or a directory of them: the config is the manifest's, the weights model.safetensors.
  auto check = [&](const LoadedCheckpoint& c) {
    if (!c.info.contains("model"))
      throw IoError("checkpoint " + c.path + ": the manifest has no model config");
    const GptConfig cfg =
        config_from_json_text(c.info["model"].dump(), "checkpoint " + c.path + " model config");
    const auto it = c.files.find("model.safetensors");
    if (it == c.files.end()) throw IoError("checkpoint " + c.path + ": no model.safetensors");
    out.model =
        build_and_load(cfg, SafetensorsFile::parse(it->second, c.path + "/model.safetensors"), c.path);
  };
  const std::optional<LoadedCheckpoint> c = resolve_checkpoint(path, check, warn);
  if (!c) throw IoError("no checkpoint in " + path);
  n_head_unused("the checkpoint's manifest");
  out.source = c->path;
  out.step = c->step;
  out.nonfinite_weights = numeric_stats(out.model->params().flat_params()).nonfinite;
  return out;
}

GptConfig gpt_config_of(const std::string& path, const std::function<void(const std::string&)>& warn) {
  return load_gpt_for_inference(path, 0, warn).model->config();
}

std::string load_gpt_weights_into(const std::string& path, Gpt& model,
                                  const std::function<void(const std::string&)>& warn) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    load_gpt_safetensors(SafetensorsFile::read(path), model);
    return path;
  }
  if (const std::string file = model_dir_file(path); !file.empty()) {  // a Hugging Face model directory
    load_gpt_safetensors(SafetensorsFile::read(file), model);
    return file;
  }
  auto check = [&](const LoadedCheckpoint& c) {
    const auto it = c.files.find("model.safetensors");
    if (it == c.files.end()) throw IoError("checkpoint " + c.path + ": no model.safetensors");
    load_gpt_safetensors(SafetensorsFile::parse(it->second, c.path + "/model.safetensors"), model);
  };
  const std::optional<LoadedCheckpoint> c = resolve_checkpoint(path, check, warn);
  if (!c) throw IoError("no checkpoint in " + path);
  return c->path;
}

}  // namespace mixtrain
