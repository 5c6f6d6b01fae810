// EncoderConfig from Hugging Face's BertConfig / DistilBertConfig JSON.
#include "models/encoder_config.h"

#include <cmath>
#include <limits>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

struct Reader {
  const nlohmann::json& j;
  const std::string& where;
  int64_t integer(const char* key) const {
    const auto it = j.find(key);
    if (it == j.end()) throw ArgumentError(where + ": missing key '" + key + "'");
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (int64_t{1} << 31))
      throw ArgumentError(where + ": '" + key + "' must be a positive integer");
    return it->get<int64_t>();
  }
  float number(const char* key, float fallback) const {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number()) throw ArgumentError(where + ": '" + key + "' must be a number");
    const double v = it->get<double>();  // a double past float's range would convert undefined
    if (!(std::fabs(v) <= std::numeric_limits<float>::max()))
      throw ArgumentError(where + ": '" + key + "' is not a finite fp32 number");
    return static_cast<float>(v);
  }
  std::string text(const char* key, const std::string& fallback) const {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_string()) throw ArgumentError(where + ": '" + key + "' must be a string");
    return it->get<std::string>();
  }
};

void check_probability(float p, const std::string& where, const char* key) {
  if (!(p >= 0.f && p < 1.f)) throw ArgumentError(where + ": '" + key + "' must be in [0, 1)");
}

}  // namespace

EncoderConfig EncoderConfig::from_hf_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw ArgumentError(where + ": config must be a JSON object");
  const Reader r{j, where};
  EncoderConfig c;
  c.raw = j;
  const std::string type = r.text("model_type", "");
  if (type == "bert") {
    c.family = EncoderFamily::bert;
    c.vocab_size = r.integer("vocab_size");
    c.hidden = r.integer("hidden_size");
    c.layers = r.integer("num_hidden_layers");
    c.heads = r.integer("num_attention_heads");
    c.intermediate = r.integer("intermediate_size");
    c.max_positions = r.integer("max_position_embeddings");
    c.type_vocab_size = r.integer("type_vocab_size");
    c.layer_norm_eps = r.number("layer_norm_eps", 1e-12f);
    c.hidden_dropout = r.number("hidden_dropout_prob", 0.1f);
    c.attention_dropout = r.number("attention_probs_dropout_prob", 0.1f);
    if (r.text("hidden_act", "gelu") != "gelu")
      throw ArgumentError(where + ": 'hidden_act' " + r.text("hidden_act", "") +
                          " is not supported (only \"gelu\")");
    if (r.text("position_embedding_type", "absolute") != "absolute")
      throw ArgumentError(where + ": 'position_embedding_type' must be \"absolute\"");
  } else if (type == "distilbert") {
    c.family = EncoderFamily::distilbert;
    c.vocab_size = r.integer("vocab_size");
    c.hidden = r.integer("dim");
    c.layers = r.integer("n_layers");
    c.heads = r.integer("n_heads");
    c.intermediate = r.integer("hidden_dim");
    c.max_positions = r.integer("max_position_embeddings");
    c.hidden_dropout = r.number("dropout", 0.1f);
    c.attention_dropout = r.number("attention_dropout", 0.1f);
    const auto s = j.find("sinusoidal_pos_embds");
    if (s != j.end() && !s->is_boolean())
      throw ArgumentError(where + ": 'sinusoidal_pos_embds' must be a boolean");
    c.sinusoidal_positions = s != j.end() && s->get<bool>();
    if (r.text("activation", "gelu") != "gelu")
      throw ArgumentError(where + ": 'activation' " + r.text("activation", "") +
                          " is not supported (only \"gelu\")");
  } else {
    throw ArgumentError(where + ": 'model_type' must be \"bert\" or \"distilbert\", got \"" + type + "\"");
  }
  c.initializer_range = r.number("initializer_range", 0.02f);
  const auto pad = j.find("pad_token_id");  // BertConfig and DistilBertConfig default to 0
  if (pad != j.end() && !pad->is_null()) {
    if (!pad->is_number_integer() || pad->get<int64_t>() < 0 || pad->get<int64_t>() >= c.vocab_size)
      throw ArgumentError(where + ": 'pad_token_id' must be an integer in [0, vocab_size)");
    c.pad_token_id = pad->get<int64_t>();
  }
  if (c.hidden % c.heads != 0)
    throw ArgumentError(where + ": hidden size " + std::to_string(c.hidden) + " is not divisible by " +
                        std::to_string(c.heads) + " heads");
  if (!(c.layer_norm_eps > 0.f)) throw ArgumentError(where + ": 'layer_norm_eps' must be positive");
  if (!(c.initializer_range >= 0.f)) throw ArgumentError(where + ": 'initializer_range' must be >= 0");
  // Per-layer tensors cost metadata however small they are: a config of 65,000 one-wide layers
  // built 2 GB of them before the weights were found missing. GPT's configs have the same cap.
  if (c.layers > 4096) throw ArgumentError(where + ": " + std::to_string(c.layers) + " layers: at most 4096");
  check_probability(c.hidden_dropout, where, "hidden dropout");
  check_probability(c.attention_dropout, where, "attention dropout");
  return c;
}

double EncoderConfig::encoder_parameters() const {
  const double V = static_cast<double>(vocab_size), P = static_cast<double>(max_positions),
               TV = static_cast<double>(type_vocab_size), C = static_cast<double>(hidden),
               I = static_cast<double>(intermediate), L = static_cast<double>(layers);
  // qkv 3C^2 + 3C, attention output C^2 + C, two LayerNorms 4C, FFN 2CI + I + C.
  const double layer = 4 * C * C + 4 * C + 4 * C + 2 * C * I + I + C;
  return (V + P + TV) * C + 2 * C + L * layer;
}

}  // namespace mixtrain
