// libFuzzer target: an encoder model directory's config.json (BERT, DistilBERT: all-MiniLM-L6-v2,
// a model saved by finetune --save), on any bytes written to the directory's config.json as a user
// hands it over: saved_classifier_options (id2label, mixtrain_pooling), load_encoder_classifier's
// reading of it (the directory has no model.safetensors, so that ends at the weights), and
// parse_untrusted_json + EncoderConfig::from_hf_json in memory, whose result must be checked as the
// header says. An accepted config small enough to build (at most 2^15 encoder parameters and 8
// layers) builds the classifier, and the config.json it saves must read back the same (any
// exception there is a finding). Inputs must be handled or throw mixtrain::Error.
#include <stdlib.h>
#include <sys/stat.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_input.h"
#include "fuzz_init.h"
#include "mixtrain/core/error.h"
#include "mixtrain/models/encoder.h"
#include "models/encoder_config.h"
#include "models/encoder_model.h"

namespace {

// Two model directories of this process's own (removed by the OS's tmp cleaning): "in" for the
// input, "saved" for the config.json a built model writes back.
const std::string& work_dir() {
  static const std::string dir = [] {
    char t[] = "/tmp/mixtrain-encoder-config-fuzz-XXXXXX";
    if (mkdtemp(t) == nullptr) abort();
    const std::string d(t);
    if (::mkdir((d + "/in").c_str(), 0700) != 0 || ::mkdir((d + "/saved").c_str(), 0700) != 0) abort();
    return d;
  }();
  return dir;
}

void write(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, n, f) != n || std::fclose(f) != 0) abort();
}

bool in_range(int64_t v) { return v >= 1 && v <= (int64_t{1} << 31); }

// What from_hf_json promises of a config it accepts.
void check(const mixtrain::EncoderConfig& c, const nlohmann::json& j) {
  const bool bert = c.family == mixtrain::EncoderFamily::bert;
  if (!in_range(c.vocab_size) || !in_range(c.max_positions) || !in_range(c.hidden) || !in_range(c.layers) ||
      !in_range(c.heads) || !in_range(c.intermediate) || c.hidden % c.heads != 0)
    __builtin_trap();
  if (bert ? !in_range(c.type_vocab_size) : c.type_vocab_size != 0) __builtin_trap();
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size || !(c.layer_norm_eps > 0.f)) __builtin_trap();
  if (!(c.hidden_dropout >= 0.f && c.hidden_dropout < 1.f) ||
      !(c.attention_dropout >= 0.f && c.attention_dropout < 1.f))
    __builtin_trap();
  if (c.raw != j) __builtin_trap();
  const double n = c.encoder_parameters();
  if (!std::isfinite(n) || !(n > 0)) __builtin_trap();
}

bool same(const mixtrain::EncoderConfig& a, const mixtrain::EncoderConfig& b) {
  return a.family == b.family && a.vocab_size == b.vocab_size && a.max_positions == b.max_positions &&
         a.type_vocab_size == b.type_vocab_size && a.hidden == b.hidden && a.layers == b.layers &&
         a.heads == b.heads && a.intermediate == b.intermediate && a.layer_norm_eps == b.layer_norm_eps &&
         a.hidden_dropout == b.hidden_dropout && a.attention_dropout == b.attention_dropout &&
         a.initializer_range == b.initializer_range && a.pad_token_id == b.pad_token_id &&
         a.sinusoidal_positions == b.sinusoidal_positions;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = work_dir();
  write(dir + "/in/config.json", data, size);
  mixtrain::ClassifierOptions saved;
  try {
    saved = mixtrain::saved_classifier_options(dir + "/in");
  } catch (const mixtrain::Error&) {
  }
  mixtrain::ClassifierOptions options;
  options.labels = {"neg", "pos"};
  try {
    (void)mixtrain::load_encoder_classifier(dir + "/in", options);
    __builtin_trap();  // there is no model.safetensors to load
  } catch (const mixtrain::Error&) {
  }

  nlohmann::json j;
  mixtrain::EncoderConfig c;
  try {
    j = mixtrain::parse_untrusted_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    c = mixtrain::EncoderConfig::from_hf_json(j, "fuzz");
  } catch (const mixtrain::Error&) {
    return 0;
  }
  check(c, j);
  // Building costs time per layer and per tensor beyond the parameters (a 1-wide 2000-layer model
  // is small but slow under ASan): small models only.
  if (c.encoder_parameters() > double(1 << 15) || c.layers > 8) return 0;
  // Built, saved and read back: a model saved from this config must load with the same one. An
  // exception here is a finding too (uncaught, so its message shows): the config was accepted.
  if (saved.labels.size() >= 2 && saved.labels.size() <= 16) options.labels = saved.labels;
  options.pooling = saved.pooling;
  const mixtrain::EncoderClassifier m(c, options);
  const std::string text = m.config_json();
  write(dir + "/saved/config.json", text.data(), text.size());
  const mixtrain::EncoderConfig back =
      mixtrain::EncoderConfig::from_hf_json(mixtrain::parse_untrusted_json(text, "saved"), "saved");
  const mixtrain::ClassifierOptions o = mixtrain::saved_classifier_options(dir + "/saved");
  if (!same(c, back) || o.labels != options.labels || o.pooling != options.pooling) __builtin_trap();
  return 0;
}
