// The configuration of an encoder classifier, read from a Hugging Face config.json: BERT
// ("model_type": "bert", BertConfig's keys) or DistilBERT ("distilbert", DistilBertConfig's keys),
// normalised into one struct. The original JSON object is kept so a saved model's config.json
// carries every field it was loaded with.
//
// Dimension letters: V vocab, P positions, C hidden, L layers, H heads, I intermediate, K labels.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mixtrain {

enum class EncoderFamily { bert, distilbert };

struct EncoderConfig {
  EncoderFamily family = EncoderFamily::bert;
  int64_t vocab_size = 0;         // V
  int64_t max_positions = 0;      // P (max_position_embeddings)
  int64_t type_vocab_size = 0;    // BERT's token types (0 for DistilBERT)
  int64_t hidden = 0;             // C (hidden_size / dim)
  int64_t layers = 0;             // L (num_hidden_layers / n_layers)
  int64_t heads = 0;              // H (num_attention_heads / n_heads)
  int64_t intermediate = 0;       // I (intermediate_size / hidden_dim)
  float layer_norm_eps = 1e-12f;  // BERT: layer_norm_eps; DistilBERT: 1e-12 (fixed in its code)
  // The config's dropouts, read and checked; training uses ClassifierOptions::dropout instead.
  float hidden_dropout = 0.1f;     // hidden_dropout_prob / dropout
  float attention_dropout = 0.1f;  // attention_probs_dropout_prob / attention_dropout
  float initializer_range = 0.02f;
  // The word embedding's padding row (no gradient, as torch's padding_idx); -1: none.
  int64_t pad_token_id = 0;
  bool sinusoidal_positions = false;  // DistilBERT's sinusoidal_pos_embds: fixed, not trained
  nlohmann::json raw;                 // the config.json object as read

  // Parses a config.json object; ArgumentError naming `where` and the key for a missing or wrongly
  // typed value, an unsupported model_type, hidden_act / activation other than "gelu", or
  // position_embedding_type other than "absolute".
  static EncoderConfig from_hf_json(const nlohmann::json& j, const std::string& where);
  // Elements of the encoder's parameters (embeddings and layers, no head), computed in double so a
  // hostile config cannot overflow it: what a weights file must hold before anything is allocated.
  double encoder_parameters() const;
};

}  // namespace mixtrain
