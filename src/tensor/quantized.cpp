// QuantScheme names and code dtypes (tensor/quantized.h).
#include "mixtrain/tensor/quantized.h"

#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain {

std::string_view quant_scheme_name(QuantScheme s) {
  switch (s) {
    case QuantScheme::none:
      return "none";
    case QuantScheme::int8_dynamic:
      return "int8-dynamic";
    case QuantScheme::int8_weight:
      return "int8-weight";
    case QuantScheme::fp8:
      return "fp8";
  }
  return "?";
}

QuantScheme parse_quant_scheme(std::string_view s) {
  for (QuantScheme q : {QuantScheme::int8_dynamic, QuantScheme::int8_weight, QuantScheme::fp8})
    if (s == quant_scheme_name(q)) return q;
  throw ArgumentError({"scheme"}, "unknown quantization scheme '" + std::string(s) +
                                      "' (valid: int8-dynamic, int8-weight, fp8)");
}

DType quant_code_dtype(QuantScheme s) {
  switch (s) {
    case QuantScheme::int8_dynamic:
    case QuantScheme::int8_weight:
      return DType::i8;
    case QuantScheme::fp8:
      return DType::f8_e4m3;
    case QuantScheme::none:
      break;
  }
  throw ArgumentError("quant_code_dtype: no codes for scheme 'none'");
}

}  // namespace mixtrain
