// libFuzzer target: the model-config parsers (mixtrain's JSON config and Hugging Face's
// config.json, GPT-2's and the encoders' (BERT, DistilBERT)). Inputs must parse or throw
// mixtrain::Error.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_init.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/core/error.h"
#include "mixtrain/models/gpt.h"
#include "models/encoder_config.h"
#include "models/gpt_config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)mixtrain::gpt_config_from_hf_json(text, "fuzz");
  } catch (const mixtrain::Error&) {
  }
  // GptConfig::from_json_file's path: parse (IoError on malformed JSON), then from_json.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) {
    try {
      (void)mixtrain::gpt_config_from_json(j, "fuzz");
    } catch (const mixtrain::Error&) {
    }
    try {
      (void)mixtrain::EncoderConfig::from_hf_json(j, "fuzz").encoder_parameters();
    } catch (const mixtrain::Error&) {
    }
  }
  return 0;
}
