// Quantized weights in model files (`mixtrain quantize`'s output): the layout compressed-tensors
// (vLLM, llm-compressor) gives an int8 / fp8 checkpoint, so a Hugging Face user recognises it:
// `<layer>.weight` holds the codes (I8 or F8_E4M3) and `<layer>.weight_scale` the fp32 scales,
// shaped to broadcast against the codes (one per output channel / table row), and config.json
// has a quantization_config (quant_method "compressed-tensors", format int-quantized or
// float-quantized, config_groups for the linear layers and the embedding tables, the layers
// left unquantized under "ignore"), plus "mixtrain_scheme" naming the scheme exactly.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"
#include "mixtrain/models/model.h"

namespace mixtrain {

// Every weight of `weights` into w: float tensors under their names, quantized ones as codes
// under their name and scales under name + "_scale".
void add_named_weights(SafetensorsWriter& w, const std::vector<NamedWeight>& weights);

struct QuantizedFileTensor {
  Tensor codes, scale;  // contiguous copies (MemCategory::workspace)
};
// The codes entry and its scale entry of `file`, checked against what `want` (a quantized
// NamedWeight of the model) holds: the codes' dtype and shape, an F32 scale of want.scale's
// shape, every scale finite and positive, no NaN code (E4M3). IoError / DTypeError / ShapeError
// naming the file and the tensor otherwise.
QuantizedFileTensor read_quantized(const SafetensorsFile& file, const SafetensorsEntry& codes,
                                   const SafetensorsEntry& scale, const NamedWeight& want);

// The loaders' step for one quantized weight: takes the codes entry `key` and its `key`_scale out
// of by_name (the file's entries by name, as the loader indexes them; `key` found there), reads
// and checks them (read_quantized) and appends the (destination, source) copies, codes then
// scale. IoError naming want.name when the scale entry is missing.
void take_quantized(const SafetensorsFile& file, std::map<std::string, const SafetensorsEntry*>& by_name,
                    const std::string& key, const NamedWeight& want,
                    std::vector<std::pair<Tensor, Tensor>>& copies);

// config.json's quantization_config for `scheme`; `ignore` names the unquantized linear layers.
nlohmann::ordered_json quantization_config_json(QuantScheme scheme, const std::vector<std::string>& ignore);
// The scheme a config.json's quantization_config describes (none without one). IoError naming
// `where` for one that is malformed or that mixtrain cannot run (not 8-bit per-channel weights).
QuantScheme quantization_scheme_of(const nlohmann::json& config, const std::string& where);

}  // namespace mixtrain
