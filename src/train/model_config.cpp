// Model configs from presets or untrusted JSON files (train/model_config.h).
#include "train/model_config.h"

#include "core/file_io.h"
#include "core/json_input.h"
#include "models/gpt_config_json.h"

namespace mixtrain {

GptConfig load_model_config(const std::string& spec) {
  if (!(spec.size() > 5 && spec.ends_with(".json"))) return GptConfig::preset(spec);
  constexpr uint64_t kMaxConfigBytes = 1 << 20;  // a config is a few hundred bytes
  const std::vector<uint8_t> bytes = read_file_bounded(spec, kMaxConfigBytes, "model config");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return gpt_config_from_json(parse_untrusted_json(text, "model config " + spec), spec);
}

}  // namespace mixtrain
