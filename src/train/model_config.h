// The model config a run names (--model): a preset, or a JSON file read as untrusted input
// (bounded size, no duplicate keys, no deep nesting: checkpoint/json_input.h).
#pragma once
#include <string>

#include "mixtrain/models/gpt.h"

namespace mixtrain {

// A preset name, or a path ending in .json. IoError / ArgumentError naming the file.
GptConfig load_model_config(const std::string& spec);

}  // namespace mixtrain
