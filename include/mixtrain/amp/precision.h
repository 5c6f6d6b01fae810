// The precision modes users know from Lightning Fabric ("32-true", "16-mixed", "bf16-mixed",
// "16-true", "bf16-true") and what each one means for every tensor kind. One table, used by the
// trainer, the C++ API and the memory report.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/tensor/dtype.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {

// mixed_fp8 ("fp8-mixed"): bf16-mixed with the linear layers' GEMMs in fp8 (amp/fp8.h).
enum class PrecisionMode : uint8_t { true32, mixed16, mixed_bf16, true16, true_bf16, mixed_fp8 };

struct PrecisionSpec {
  PrecisionMode mode;
  std::string_view name;    // "bf16-mixed"
  DType param_dtype;        // parameters as stored (the fp32 master in the mixed modes)
  DType grad_dtype;         // gradients reaching the optimizer
  DType optim_state_dtype;  // AdamW moments / momentum
  DType compute_dtype;      // dtype of the GEMM family under autocast (f32: no autocast)
  bool autocast;            // forward runs under autocast
  bool loss_scaling;        // dynamic loss scaler on by default (16-mixed)
};

const PrecisionSpec& precision_spec(PrecisionMode m);
// The memory category of a model's weights in this mode: in the *-mixed modes the fp32 weights are
// the master copy of the 16-bit working weights (MemCategory::master_weights; the working copy,
// optim/mixed_precision.h, is MemCategory::parameters), else the parameters themselves.
MemCategory weights_category(const PrecisionSpec& spec);
// Throws ArgumentError "unknown precision 'x' (valid: 32-true, 16-mixed, bf16-mixed, 16-true, bf16-true,
// fp8-mixed)".
PrecisionMode parse_precision(std::string_view s);
std::vector<PrecisionMode> all_precision_modes();

}  // namespace mixtrain
