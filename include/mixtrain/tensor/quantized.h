// Quantized tensors for inference: a scheme (how a model computes with them, `mixtrain quantize
// --scheme`) and a matrix of 8-bit codes with one fp32 scale per row (kernels/quantize.h).
#pragma once
#include <cstdint>
#include <string_view>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// How a quantized model computes with its quantized weights (`mixtrain quantize --scheme`):
//   int8_dynamic  int8 weights (one scale per output channel), activations quantized per token at
//                 run time, the exact int8 GEMM, dequantized with the two scales;
//   int8_weight   int8 weights dequantized into the 16-bit GEMM (memory, not speed);
//   fp8           E4M3 weights and per-token E4M3 activations, the GEMM on the bf16 units (every
//                 E4M3 value is a bf16 value), dequantized with the two scales.
// Quantized embedding tables are dequantized at lookup in every scheme.
enum class QuantScheme : uint8_t { none, int8_dynamic, int8_weight, fp8 };
std::string_view quant_scheme_name(QuantScheme s);   // "int8-dynamic", "int8-weight", "fp8", "none"
QuantScheme parse_quant_scheme(std::string_view s);  // ArgumentError naming the valid ones
DType quant_code_dtype(QuantScheme s);               // i8, i8, f8_e4m3 (ArgumentError for none)

// A parameter stored quantized: codes (rows, cols) in quant_code_dtype(scheme), one fp32 scale
// per row (kernels/quantize.h): for a model's parameter, views of its store's quantized arenas
// (nn/parameters.h).
struct QuantizedTensor {
  QuantScheme scheme = QuantScheme::none;
  Tensor codes;  // (R, C) i8 or f8_e4m3
  Tensor scale;  // (R) f32
};

}  // namespace mixtrain
