// SGD with momentum over the flat parameter arena: the same update as torch.optim.SGD
// (maximize=False, the single-tensor path), one pass over flat_params() / flat_grads() with one
// flat fp32 momentum buffer of the same layout.
//
// Per element, in torch's order (every operation rounds to fp32):
//   d = g + wd * p                     L2 weight decay, only where ParamInfo::weight_decay
//   first step:  buf = d               torch: buf = torch.clone(grad)
//   later steps: buf = buf * momentum + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf     (when momentum != 0)
//   p = p + (-lr) * d
// torch's AVX2 add(alpha=...) fuses its multiply-add, so results can differ from torch's by 1 ulp.
//
// Precision modes: fp32 stores (32-true, and the fp32 masters of the *-mixed modes) run the fp32
// kernels. *-true stores (16-bit parameters and gradients) keep the momentum buffer in 16 bits
// too; each element is loaded to fp32, updated by the same fp32 code, and rounded back as
// optim/lowp.h describes (SgdConfig::rounding for the parameter, nearest for the momentum).
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/master_weights.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct SgdConfig {
  float lr = 1e-3f;  // used by step(store); step(store, lr) overrides it
  float momentum = 0.f;
  float dampening = 0.f;
  float weight_decay = 0.f;
  bool nesterov = false;
  // 16-bit stores only (the fp32 path ignores both): how the new parameter is rounded back, and
  // the random stream of stochastic rounding.
  UpdateRounding rounding = UpdateRounding::nearest;
  uint64_t seed = 0;
  // How the momentum buffer is stored (kernels/state_kernels.h); bf16 and int8 need fp32 parameters.
  StatePrecision state = StatePrecision::fp32;
};
// Throws ArgumentError unless lr, momentum, dampening, weight_decay are >= 0 and finite, and
// nesterov has momentum > 0 and dampening == 0 (torch's rule).
void validate(const SgdConfig& config);

class SGD final : public Optimizer {
 public:
  // The momentum buffer (momentum != 0 only) and, for 16-bit parameters with kahan rounding, the
  // compensation buffer are allocated zeroed in the store's parameter dtype (f32, bf16 or f16;
  // DTypeError otherwise).
  // With a shard (optim/zero.h), the buffers cover only its elements and step() updates only
  // those, bit for bit as the unsharded update does.
  SGD(const ParameterStore& store, SgdConfig config = {}, FlatRange shard = {});

  // One update with learning rate lr (>= 0, finite), then bumps the parameters' storage version.
  // Parameters and gradients must both have the dtype the optimizer was built for (DTypeError).
  // Stochastic rounding: element i of update k (k = steps() before the call) draws
  // counter_rng(seed, k * flat_numel + i).
  // `working` (fp32 stores only; may be null): the 16-bit working copy to write in the same pass
  // (of the arena's last working->numel() elements: optim/working_copy.h).
  void step(ParameterStore& store, float lr, Tensor* working = nullptr) override;
  void step(ParameterStore& store) { step(store, config_.lr); }

  OptimizerKind kind() const override { return OptimizerKind::sgd; }
  const SgdConfig& config() const { return config_; }
  int64_t steps() const override { return steps_; }
  DType param_dtype() const override { return dtype_; }  // f32, bf16 or f16
  // param_dtype(), or f32 under master rounding; bf16 / i8 (codes) with config.state bf16 / int8.
  DType state_dtype() const override;
  // (shard size) f32 master weights; undefined unless 16-bit with master rounding.
  const Tensor& master() const { return master_.tensor(); }
  FlatRange shard() const override { return shard_; }
  // (shard size) state_dtype(); undefined when momentum == 0 (torch keeps no buffer either).
  const Tensor& momentum_buffer() const { return buf_; }
  const QuantizedMomentParts& momentum_q() const { return bq_; }  // int8 state only
  // (shard size) param_dtype() Kahan compensation; undefined unless 16-bit with kahan rounding.
  const Tensor& compensation() const { return c_; }
  // Bytes of optimizer state: the momentum buffer (4 or 2 per element, momentum != 0 only) plus
  // the compensation (2 per element, kahan only).
  int64_t state_bytes() const override;
  // momentum_buffer and compensation (shared); restore() checks the kind and that the momentum
  // buffer and the Kahan compensation are present exactly when this optimizer keeps them.
  OptimizerState state() const override;
  void restore(const OptimizerState& s) override;
  // Checkpoint restore; momentum_buffer must be (shard size) or (flat_numel) (the shard's
  // elements taken) when momentum != 0 (ShapeError),
  // and is ignored otherwise. The compensation is copied when given, and reset to zero otherwise.
  // Under master rounding the fp32 master weights are copied from `master` when given, and
  // filled from the parameters at the next step otherwise.
  void set_state(int64_t steps, const Tensor& momentum_buffer, const Tensor& compensation = {},
                 const Tensor& master = {});

 private:
  SgdConfig config_;
  int64_t flat_numel_ = 0;
  FlatRange shard_;                     // the elements updated: [0, flat_numel) unless sharded
  std::vector<FlatSpan> whole_;         // one per parameter, arena offsets
  std::vector<FlatSpan> spans_;         // inside the shard, offsets from its start
  std::vector<StateSpan> state_spans_;  // the same, with where their bf16 / int8 state lives
  int64_t steps_ = 0;
  DType dtype_ = DType::f32;
  Tensor buf_;               // (shard size) dtype_ momentum buffer
  Tensor c_;                 // (shard size) dtype_ Kahan compensation, 16-bit kahan only
  MasterCopy master_;        // (shard size) f32 master weights, 16-bit master rounding only
  QuantizedMomentParts bq_;  // int8 state: absmax and fp32 fallback of the momentum buffer
};

}  // namespace mixtrain
