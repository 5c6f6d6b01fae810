// A linear layer whose three GEMMs (forward, input gradient, weight gradient) run on fp8
// operands, as Transformer Engine's Linear does under fp8_autocast: x and w quantized to the
// forward format (E4M3), the output gradient to the backward format (E5M2 under the hybrid
// format, else E4M3), each operand as the site's recipe quantizes it for that GEMM
// (kernels/fp8.h: fp8_operand_quant), fp32 accumulation, the scales applied to the fp32 result
// (delayed, current, rowwise) or folded into dequantized bf16 operands (mxfp8, block). The
// output and the gradients leave in the compute dtype (bf16); the bias and its gradient stay in
// high precision (the bias gradient sums the unquantized output gradient). Everything else of the
// mode is bf16-mixed (amp/fp8.h).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "mixtrain/autograd/variable.h"
#include "mixtrain/kernels/fp8.h"

namespace mixtrain::autograd {

// The three tensor roles of a site (Transformer Engine's meta indices: input, weight, grad_output).
enum class Fp8Role : uint8_t { input, weight, grad_output };
constexpr int kFp8Roles = 3;
const char* fp8_role_name(Fp8Role r);  // "input", "weight", "grad_output"

// One fp8 linear layer's recipe and state. The scales are the delayed recipe's (the ones this
// step's casts use; amp/fp8.h updates them from the amax history after each optimizer step; 1
// until then); step_amax is the largest amax each role's casts saw since the last update (every
// recipe records it: the diagnostics read it).
struct Fp8Site {
  std::string path;  // the layer's module path, e.g. "transformer.h.3.mlp.c_fc"
  Fp8Recipe recipe = Fp8Recipe::current;
  DType fwd_format = DType::f8_e4m3;  // input, weight
  DType bwd_format = DType::f8_e5m2;  // grad_output
  std::array<float, kFp8Roles> scale{1.f, 1.f, 1.f};
  std::array<float, kFp8Roles> step_amax{0.f, 0.f, 0.f};
  // The fp8 diagnostics (`--numerics`): while `collect` is set, every cast adds how well it kept
  // its tensor (kernels/fp8.h: fp8_quant_error) to its role's stats.
  bool collect = false;
  std::array<Fp8ErrorStats, kFp8Roles> stats{};
  DType format(Fp8Role r) const { return r == Fp8Role::grad_output ? bwd_format : fwd_format; }
};

// out (..., OUT) = x (..., IN) w^T (+ b) with the GEMMs in fp8 (above). x, w, b are cast by
// autocast as linear's are. The same shapes and errors as linear().
Var fp8_linear(const Var& x, const Var& w, const Var& b, const std::shared_ptr<Fp8Site>& site);

}  // namespace mixtrain::autograd
