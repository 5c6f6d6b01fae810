// Quantized weights in model files (checkpoint/quantized_io.h).
#include "checkpoint/quantized_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

void add_named_weights(SafetensorsWriter& w, const std::vector<NamedWeight>& weights) {
  for (const NamedWeight& n : weights) {
    if (!n.quantized()) {
      w.add(n.name, n.tensor);
      continue;
    }
    w.add(n.name, n.codes);
    w.add(n.name + "_scale", n.scale);
  }
}

namespace {
std::vector<int64_t> dims(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }
}  // namespace

QuantizedFileTensor read_quantized(const SafetensorsFile& file, const SafetensorsEntry& codes,
                                   const SafetensorsEntry& scale, const NamedWeight& want) {
  const std::string where = "safetensors file " + file.name() + ": tensor '";
  const DType code_dtype = want.codes.dtype();
  if (codes.dtype != safetensors_dtype_name(code_dtype))
    throw DTypeError(where + printable(codes.name) + "' has dtype " + codes.dtype + ", expected " +
                     safetensors_dtype_name(code_dtype) + " (the codes of this quantized model)");
  if (codes.shape != dims(want.codes))
    throw ShapeError(where + printable(codes.name) + "' has shape " + shape_text(codes.shape) +
                     ", expected " + shape_text(dims(want.codes)) + " for this model");
  if (scale.dtype != "F32")
    throw DTypeError(where + printable(scale.name) + "' has dtype " + scale.dtype + ", expected F32");
  if (scale.shape != dims(want.scale))
    throw ShapeError(where + printable(scale.name) + "' has shape " + shape_text(scale.shape) +
                     ", expected " + shape_text(dims(want.scale)) + " (one scale per output channel)");
  QuantizedFileTensor q;
  q.codes = file.tensor(codes, MemCategory::workspace);
  q.scale = file.tensor(scale, MemCategory::workspace);
  if (q.scale.is_meta()) return q;
  const float* s = q.scale.data<float>();
  for (int64_t i = 0; i < q.scale.numel(); ++i)
    if (!(std::isfinite(s[i]) && s[i] > 0.f))
      throw IoError(where + printable(scale.name) + "' holds the scale " + std::to_string(s[i]) + " at " +
                    std::to_string(i) + " (scales must be finite and positive)");
  if (code_dtype == DType::f8_e4m3) {
    const uint8_t* c = static_cast<const uint8_t*>(q.codes.raw_data());
    for (int64_t i = 0; i < q.codes.numel(); ++i)
      if ((c[i] & 0x7f) == 0x7f)
        throw IoError(where + printable(codes.name) + "' holds a NaN code at " + std::to_string(i));
  }
  return q;
}

void take_quantized(const SafetensorsFile& file, std::map<std::string, const SafetensorsEntry*>& by_name,
                    const std::string& key, const NamedWeight& want,
                    std::vector<std::pair<Tensor, Tensor>>& copies) {
  const auto it = by_name.find(key), sit = by_name.find(key + "_scale");
  if (sit == by_name.end())
    throw IoError("safetensors file " + file.name() + ": missing tensor '" + want.name +
                  "_scale' (the scales of the quantized '" + want.name + "')");
  const QuantizedFileTensor q = read_quantized(file, *it->second, *sit->second, want);
  copies.emplace_back(want.codes, q.codes);
  copies.emplace_back(want.scale, q.scale);
  by_name.erase(it);
  by_name.erase(sit);
}

nlohmann::ordered_json quantization_config_json(QuantScheme scheme, const std::vector<std::string>& ignore) {
  const bool fp = scheme == QuantScheme::fp8;
  const char* type = fp ? "float" : "int";
  auto args = [&](const char* strategy, bool dynamic) {
    nlohmann::ordered_json a;
    a["num_bits"] = 8;
    a["type"] = type;
    a["symmetric"] = true;
    a["strategy"] = strategy;
    a["dynamic"] = dynamic;
    return a;
  };
  nlohmann::ordered_json linear;
  linear["targets"] = {"Linear"};
  linear["weights"] = args("channel", false);
  linear["input_activations"] =
      scheme == QuantScheme::int8_weight ? nlohmann::ordered_json() : args("token", true);
  nlohmann::ordered_json table;
  table["targets"] = {"Embedding"};
  table["weights"] = args("channel", false);  // one scale per row
  table["input_activations"] = nullptr;
  nlohmann::ordered_json q;
  q["quant_method"] = "compressed-tensors";
  q["format"] = fp ? "float-quantized" : "int-quantized";
  q["quantization_status"] = "compressed";
  q["config_groups"] = {{"group_0", linear}, {"group_1", table}};
  q["ignore"] = ignore;
  q["mixtrain_scheme"] = std::string(quant_scheme_name(scheme));
  return q;
}

QuantScheme quantization_scheme_of(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object()) return QuantScheme::none;
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return QuantScheme::none;
  const nlohmann::json& q = *it;
  const std::string w = where + ": quantization_config";
  if (!q.is_object()) throw IoError(w + " must be an object");
  if (const auto s = q.find("mixtrain_scheme"); s != q.end()) {
    if (!s->is_string()) throw IoError(w + ".mixtrain_scheme must be a string");
    try {
      return parse_quant_scheme(s->get<std::string>());
    } catch (const ArgumentError& e) {
      throw IoError(w + ".mixtrain_scheme: " + e.what());
    }
  }
  // A compressed-tensors config another tool wrote: the linear layers' group says the scheme.
  if (q.value("quant_method", nlohmann::json()) != "compressed-tensors")
    throw IoError(w + ": quant_method " + json_excerpt(q.value("quant_method", nlohmann::json())) +
                  " is not one mixtrain runs (compressed-tensors with 8-bit per-channel weights)");
  const nlohmann::json groups = q.value("config_groups", nlohmann::json());
  if (!groups.is_object() || groups.empty()) throw IoError(w + ": no config_groups");
  for (const auto& [name, g] : groups.items()) {
    if (!g.is_object()) throw IoError(w + ".config_groups." + printable(name) + " must be an object");
    const nlohmann::json targets = g.value("targets", nlohmann::json());
    if (!targets.is_array() || std::find(targets.begin(), targets.end(), "Linear") == targets.end()) continue;
    const nlohmann::json wt = g.value("weights", nlohmann::json());
    if (!wt.is_object() || wt.value("num_bits", nlohmann::json()) != 8 ||
        wt.value("strategy", nlohmann::json()) != "channel" ||
        wt.value("symmetric", nlohmann::json()) != true)
      throw IoError(w + ".config_groups." + printable(name) +
                    ".weights: mixtrain runs symmetric 8-bit per-channel weights only, got " +
                    json_excerpt(wt));
    const bool act = g.contains("input_activations") && !g["input_activations"].is_null();
    if (wt.value("type", nlohmann::json()) == "float") return QuantScheme::fp8;
    if (wt.value("type", nlohmann::json()) == "int")
      return act ? QuantScheme::int8_dynamic : QuantScheme::int8_weight;
    throw IoError(w + ".config_groups." + printable(name) + ".weights.type must be \"int\" or \"float\"");
  }
  throw IoError(w + ": no config group targets \"Linear\"");
}

}  // namespace mixtrain
