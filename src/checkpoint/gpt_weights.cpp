// GPT weights <-> safetensors in Hugging Face's GPT-2 layout (transposed Conv1D weights).
#include "checkpoint/gpt_weights.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/quantized_io.h"
#include "core/file_io.h"
#include "core/printable.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

constexpr const char* kPrefix = "transformer.";

std::string strip_prefix(const std::string& name) {
  return name.starts_with(kPrefix) ? name.substr(std::strlen(kPrefix)) : name;
}

}  // namespace

SafetensorsWriter model_safetensors_writer(const Model& model) {
  SafetensorsWriter w;
  add_named_weights(w, model.named_weights());
  w.set_metadata("format", "pt");
  return w;
}

SafetensorsWriter gpt_safetensors_writer(const Gpt& model) { return model_safetensors_writer(model); }

void save_gpt_safetensors(const std::string& path, const Gpt& model,
                          const std::map<std::string, std::string>& extra_metadata) {
  SafetensorsWriter w = gpt_safetensors_writer(model);
  for (const auto& [k, v] : extra_metadata) w.set_metadata(k, v);
  w.write(path);
}

void load_gpt_safetensors(const SafetensorsFile& file, Gpt& model) {
  const std::string where = "safetensors file " + file.name();
  // Names without the optional prefix -> entry; buffers and the tied head set aside.
  std::map<std::string, const SafetensorsEntry*> by_name;
  const SafetensorsEntry* lm_head = nullptr;
  for (const auto& e : file.entries()) {
    const std::string n = strip_prefix(e.name);
    if (n == "lm_head.weight" || e.name == "lm_head.weight") {
      lm_head = &e;
      continue;
    }
    if (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")) continue;  // causal-mask buffers
    if (!by_name.emplace(n, &e).second)
      throw IoError(where + ": tensor '" + printable(n) +
                    "' appears both with and without the 'transformer.' prefix");
  }
  ParameterStore& store = model.params();
  // Convert everything first, then copy: the model stays unchanged if any tensor is bad.
  std::vector<Tensor> loaded(store.size());
  std::vector<std::pair<Tensor, Tensor>> quantized;  // (destination view, source) of codes and scales
  const std::vector<NamedWeight> named = model.named_weights();
  for (size_t i = 0; i < store.size(); ++i) {
    const ParamInfo& p = store.infos()[i];
    const std::string n = strip_prefix(p.name);
    const auto it = by_name.find(n);
    if (it == by_name.end()) throw IoError(where + ": missing tensor '" + p.name + "'");
    if (p.quantized) {
      take_quantized(file, by_name, n, named[i], quantized);  // named_weights() follows the store's order
      continue;
    }
    const SafetensorsEntry& e = *it->second;
    DType t{};
    if (!dtype_from_safetensors(e.dtype, t) || !is_floating(t))
      throw DTypeError(where + ": tensor '" + printable(e.name) + "' has dtype " + e.dtype +
                       ", expected a float type");
    std::vector<int64_t> want(p.shape.begin(), p.shape.end());
    if (is_hf_conv1d_weight(p.name) && want.size() == 2) std::swap(want[0], want[1]);
    if (e.shape != want)
      throw ShapeError(where + ": tensor '" + printable(e.name) + "' has shape " + shape_text(e.shape) +
                       ", expected " + shape_text(want) + " for this model");
    const Tensor x = file.tensor(e, MemCategory::workspace);
    loaded[i] = is_hf_conv1d_weight(p.name) ? x.transpose(0, 1) : x;  // (IN, OUT) -> our (OUT, IN)
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw IoError(where + ": unexpected tensor '" + printable(by_name.begin()->second->name) +
                  "' for this model");
  if (lm_head && store.is_quantized("transformer.wte.weight"))
    throw IoError(where + ": lm_head.weight beside a quantized wte (the output head is tied to wte's codes)");
  if (lm_head) {
    const Tensor& wte = loaded[store.index("transformer.wte.weight")];
    const std::vector<int64_t> want(wte.shape().begin(), wte.shape().end());
    bool same = lm_head->shape == want;
    if (same) {
      DType t{};
      same = dtype_from_safetensors(lm_head->dtype, t) && is_floating(t);
      if (same) {
        const Tensor head = file.tensor(*lm_head, MemCategory::workspace).to(DType::f64);
        const Tensor w = wte.to(DType::f64);
        same = std::memcmp(head.raw_data(), w.raw_data(), w.nbytes()) == 0;
      }
    }
    if (!same)
      throw IoError(where + ": lm_head.weight differs from wte (untied output heads are not supported)");
  }
  for (size_t i = 0; i < store.size(); ++i)
    if (!store.is_quantized(i)) store.param(i).copy_from(loaded[i]);
  for (auto& [dst, src] : quantized) dst.copy_from(src);
  store.mark_written();
}

std::string gpt2_hf_config_json(const GptConfig& c, std::string_view vocab_json) {
  nlohmann::json end_of_text = nullptr;
  if (!vocab_json.empty()) {
    const nlohmann::json vocab = nlohmann::json::parse(vocab_json, nullptr, /*allow_exceptions=*/false);
    const auto it = vocab.is_object() ? vocab.find("<|endoftext|>") : vocab.end();
    if (it != vocab.end() && it->is_number_integer() && it->get<int64_t>() >= 0 &&
        it->get<int64_t>() < c.vocab_size)
      end_of_text = it->get<int64_t>();
  }
  const nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
                            {"model_type", "gpt2"},
                            {"vocab_size", c.vocab_size},
                            {"n_positions", c.block_size},
                            {"n_ctx", c.block_size},
                            {"n_embd", c.n_embd},
                            {"n_layer", c.n_layer},
                            {"n_head", c.n_head},
                            {"n_inner", nullptr},  // 4 * n_embd
                            {"activation_function", "gelu_new"},
                            {"layer_norm_epsilon", c.ln_eps},
                            {"resid_pdrop", c.dropout},
                            {"embd_pdrop", c.dropout},
                            {"attn_pdrop", c.dropout},
                            {"initializer_range", 0.02},
                            {"tie_word_embeddings", true},
                            {"bos_token_id", end_of_text},
                            {"eos_token_id", end_of_text},
                            {"mixtrain_name", c.name}};
  return j.dump(2) + "\n";
}

GptConfig infer_gpt_config(const SafetensorsFile& file, int64_t n_head, float ln_eps) {
  const std::string where = "safetensors file " + file.name();
  auto find = [&](const std::string& n) -> const SafetensorsEntry* {
    const SafetensorsEntry* e = file.find(std::string(kPrefix) + n);
    return e ? e : file.find(n);
  };
  const SafetensorsEntry* wte = find("wte.weight");
  const SafetensorsEntry* wpe = find("wpe.weight");
  if (!wte || !wpe || wte->shape.size() != 2 || wpe->shape.size() != 2 || wte->shape[1] != wpe->shape[1])
    throw IoError(where + ": no GPT-2 embeddings (wte.weight, wpe.weight of shapes (V, C), (T, C))");
  GptConfig c;
  c.name = file.name();
  c.vocab_size = wte->shape[0];
  c.block_size = wpe->shape[0];
  c.n_embd = wte->shape[1];
  c.n_head = n_head;
  c.ln_eps = ln_eps;
  int64_t layers = 0;
  while (find("h." + std::to_string(layers) + ".ln_1.weight")) ++layers;
  c.n_layer = layers;
  try {
    c.validate();
  } catch (const ArgumentError& e) {
    throw IoError(where + ": " + e.what());
  }
  return c;
}

}  // namespace mixtrain
