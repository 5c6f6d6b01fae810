// The fp8 advice's measurements and bounds (`mixtrain numerics --advise`, train/numerics_advice.h):
// per fp8 candidate linear layer, how each recipe's casts kept its input, weight and output
// gradient (src/train/fp8_advice_hook.h measures them on the side of the probe run).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/kernels/fp8.h"

namespace mixtrain {

// fp8's bound on a quantized tensor's relative error, per format: twice what round-to-nearest
// alone costs values spread over the format's normal range (2^-m / sqrt(12) over a mean
// significand of about 1.44: 0.025 with E4M3's 3 mantissa bits, 0.050 with E5M2's 2; measured
// 0.027 and 0.053 on gpt-nano; MXFP8's 32-blocks 0.031-0.034, the spec's exponent rule clipping
// their largest values). Above it the scale lost values to saturation or underflow, which is what
// departs an fp8 run from bf16's.
constexpr double kFp8ErrorBoundE4m3 = 0.05;
constexpr double kFp8ErrorBoundE5m2 = 0.10;
// ... and on the share of its nonzero values that became zero or subnormal: an outlier that sets a
// per-tensor scale hides the rest of the tensor's loss in the norm (the outlier is kept, the
// others underflow). Healthy casts underflow 0-0.3% of values (gpt-nano, every recipe).
constexpr double kFp8UnderflowBound = 0.05;

// One fp8 candidate's measurements: per recipe (Fp8Recipe's order), per role slot (input and
// weight in E4M3, the output gradient in E4M3 and in E5M2).
enum class Fp8Slot : uint8_t { input, weight, grad_e4m3, grad_e5m2 };
constexpr int kFp8Slots = 4;
constexpr int kFp8Recipes = 5;
struct Fp8SiteAdvice {
  std::string site;         // "transformer.h.3.mlp.c_fc"
  bool first_last = false;  // in the first or last transformer block (bf16 unless --fp8-first-last)
  std::array<std::array<Fp8ErrorStats, kFp8Slots>, kFp8Recipes> stats{};
  const Fp8ErrorStats& at(Fp8Recipe r, Fp8Slot s) const { return stats[size_t(r)][size_t(s)]; }
  // The roles over their bound under the recipe, its gradients in E5M2 (hybrid) or E4M3: "input",
  // "weight", "grad_output"; empty: safe.
  std::vector<std::string> over_bound(Fp8Recipe r, bool hybrid) const;
};

}  // namespace mixtrain
