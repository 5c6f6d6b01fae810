// The precision-mode table (semantics: Lightning Fabric's precision plugins, see
// shared/reference/amp-semantics.md).
#include "mixtrain/amp/precision.h"

#include <array>
#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

//                         mode                     name          param        grad         optim state
//                         compute      autocast scaler
constexpr std::array<PrecisionSpec, 6> kSpecs = {{
    {PrecisionMode::true32, "32-true", DType::f32, DType::f32, DType::f32, DType::f32, false, false},
    {PrecisionMode::mixed16, "16-mixed", DType::f32, DType::f32, DType::f32, DType::f16, true, true},
    {PrecisionMode::mixed_bf16, "bf16-mixed", DType::f32, DType::f32, DType::f32, DType::bf16, true, false},
    {PrecisionMode::true16, "16-true", DType::f16, DType::f16, DType::f16, DType::f16, false, false},
    {PrecisionMode::true_bf16, "bf16-true", DType::bf16, DType::bf16, DType::bf16, DType::bf16, false, false},
    // bf16-mixed's table: its fp8 GEMMs are the linear layers' own (amp/fp8.h)
    {PrecisionMode::mixed_fp8, "fp8-mixed", DType::f32, DType::f32, DType::f32, DType::bf16, true, false},
}};

}  // namespace

const PrecisionSpec& precision_spec(PrecisionMode m) { return kSpecs[static_cast<size_t>(m)]; }

MemCategory weights_category(const PrecisionSpec& spec) {
  return spec.autocast && spec.param_dtype == DType::f32 ? MemCategory::master_weights
                                                         : MemCategory::parameters;
}

std::vector<PrecisionMode> all_precision_modes() {
  std::vector<PrecisionMode> v;
  for (const auto& s : kSpecs) v.push_back(s.mode);
  return v;
}

PrecisionMode parse_precision(std::string_view s) {
  for (const auto& spec : kSpecs)
    if (spec.name == s) return spec.mode;
  throw ArgumentError("unknown precision '" + std::string(s) +
                      "' (valid: 32-true, 16-mixed, bf16-mixed, 16-true, bf16-true, fp8-mixed)");
}

}  // namespace mixtrain
