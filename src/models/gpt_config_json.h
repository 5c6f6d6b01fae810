// GptConfig <-> nlohmann::json, for the readers and writers inside the library (checkpoints,
// the training state, the CLI's JSON); the public header (models/gpt.h) offers JSON text only.
// Defined in models/gpt.cpp; GptConfig only declared here (models/gpt.h includes nothing back).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mixtrain {

struct GptConfig;

// A JSON object with any of GptConfig's fields; missing fields keep the defaults. ArgumentError
// naming `where` for a non-object, an unknown key or a wrongly typed value.
GptConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json gpt_config_to_json(const GptConfig& c);

}  // namespace mixtrain
