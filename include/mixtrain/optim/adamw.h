// AdamW over the flat parameter arena: the same update as torch.optim.AdamW (amsgrad=False,
// maximize=False, the single-tensor path), one pass over flat_params() / flat_grads() with the
// moments m and v as two flat fp32 buffers of the same layout (STYLE lesson 9).
//
// Per element, step t counted from 1, in torch's order (every operation rounds to fp32):
//   p = p * (1 - lr*wd)                          only where ParamInfo::weight_decay (decoupled)
//   m = lerp(m, g, 1 - beta1)                    torch: exp_avg.lerp_(grad, 1 - beta1)
//   v = v * beta2 + ((1 - beta2) * g) * g        torch: exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p + (-(lr / (1 - beta1^t)) * m) / denom  torch: p.addcdiv_(m, denom, value=-step_size)
// The scalars (1 - lr*wd, lr / (1 - beta1^t), sqrt(1 - beta2^t), ...) are computed in double
// from the float config, then rounded once to fp32, as torch does with its Python floats.
// lerp(a, b, w) = a + w*(b - a) for w < 0.5, else b - (b - a)*(1 - w) (torch's scalar lerp).
// Agreement with PyTorch: bit for bit given the same fp32 inputs and the same float-rounded
// hyper-parameters (betas=(float32(0.9), ...)), except that torch's AVX2 lerp fuses its
// multiply-add, so exp_avg (and through it p) can differ from torch's by 1 ulp.
//
// Precision modes: 32-true and the *-mixed modes hand the optimizer an fp32 store (in *-mixed the
// parameters are the fp32 master weights) and the fp32 kernels run. The *-true modes (Lightning's
// 16-true / bf16-true) hand it a store with 16-bit parameters AND gradients; m and v are then
// 16-bit too, each element is loaded to fp32, updated by the same fp32 code, and rounded back as
// optim/lowp.h describes (AdamWConfig::rounding for the parameter, nearest for m and v).
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/master_weights.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct AdamWConfig {
  float lr = 1e-3f;  // used by step(store); step(store, lr) overrides it (the schedule's value)
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  // 16-bit stores only (the fp32 path ignores both): how the new parameter is rounded back, and
  // the random stream of stochastic rounding.
  UpdateRounding rounding = UpdateRounding::nearest;
  uint64_t seed = 0;
  // How m and v are stored (kernels/state_kernels.h); bf16 and int8 need fp32 parameters.
  StatePrecision state = StatePrecision::fp32;
};
// Throws ArgumentError (one line, naming the field and value) unless lr >= 0, beta1 and beta2 in
// [0, 1), eps > 0, weight_decay >= 0, all finite.
void validate(const AdamWConfig& config);

AdamWScalars adamw_scalars(const AdamWConfig& config, float lr, int64_t step);

class AdamW final : public Optimizer {
 public:
  // Allocates zeroed m and v for the store's layout (the store must be finalized) in the dtype of
  // its parameters: f32, or bf16 / f16 for the *-true modes (DTypeError for other dtypes); plus
  // a zeroed compensation buffer when the parameters are 16-bit and config.rounding is kahan.
  // With a shard (optim/zero.h), m, v and the compensation cover only its elements, and step()
  // updates only those: the same values, bit for bit, as the unsharded update gives them.
  AdamW(const ParameterStore& store, AdamWConfig config = {}, FlatRange shard = {});

  // One update with learning rate lr (>= 0, finite), then bumps the parameters' storage version
  // (autocast's weight-cast cache keys on it). Parameters and gradients must both have the
  // parameter dtype the optimizer was built for (DTypeError), and the store its layout
  // (ArgumentError). Uses adamw_update, or adamw_update_ref when force_reference() is on. With
  // stochastic rounding, element i of update k (k = steps() before the call) draws
  // counter_rng(seed, k * flat_numel + i).
  // `working` (fp32 stores only; may be null): the 16-bit working copy to write in the same pass
  // (of the arena's last working->numel() elements: optim/working_copy.h).
  void step(ParameterStore& store, float lr, Tensor* working = nullptr) override;
  void step(ParameterStore& store) { step(store, config_.lr); }

  OptimizerKind kind() const override { return OptimizerKind::adamw; }
  const AdamWConfig& config() const { return config_; }
  int64_t steps() const override { return steps_; }      // updates done so far (t of the last update)
  DType param_dtype() const override { return dtype_; }  // f32, bf16 or f16
  // param_dtype(), or f32 under master rounding; with config.state bf16 / int8: bf16 / i8 (the
  // codes; their absmax and fp32 fallback are exp_avg_q() / exp_avg_sq_q()).
  DType state_dtype() const override;
  // (shard size) f32 master weights; undefined unless 16-bit with master rounding.
  const Tensor& master() const { return master_.tensor(); }
  FlatRange shard() const override { return shard_; }
  const Tensor& exp_avg() const { return m_; }                   // (shard size) state_dtype(), m
  const Tensor& exp_avg_sq() const { return v_; }                // (shard size) state_dtype(), v
  const QuantizedMomentParts& exp_avg_q() const { return mq_; }  // int8 state only
  const QuantizedMomentParts& exp_avg_sq_q() const { return vq_; }
  // (shard size) param_dtype() Kahan compensation; undefined unless 16-bit with kahan rounding.
  const Tensor& compensation() const { return c_; }
  // Bytes of optimizer state: m and v (8 per element in f32, 4 in 16 bits, 2 in int8 plus 8 per
  // block and 8 per element of the fp32 fallback) plus the compensation (2 per element, kahan only).
  int64_t state_bytes() const override;
  // exp_avg, exp_avg_sq and compensation (shared); restore() checks the kind, the state
  // precision (a checkpoint of another --optim-state is refused, not converted), and that a Kahan
  // compensation is present exactly when this optimizer keeps one, then calls set_state() (int8:
  // copies the codes and their parts, of the shard or of the whole arena).
  OptimizerState state() const override;
  void restore(const OptimizerState& s) override;
  // Checkpoint restore: copies the moments in and sets the step count. exp_avg and exp_avg_sq
  // must have shape (shard size) or (flat_numel) (ShapeError; of a whole arena's buffer the
  // shard's elements are taken) and any float dtype (values are cast to
  // state_dtype(), rounding to nearest). The Kahan compensation is copied from `compensation`
  // when given (same rules), and reset to zero otherwise.
  // Under master rounding the fp32 master weights are copied from `master` when given (same
  // rules), and filled from the parameters at the next step otherwise.
  void set_state(int64_t steps, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& compensation = {}, const Tensor& master = {});

 private:
  AdamWConfig config_;
  int64_t flat_numel_ = 0;
  FlatRange shard_;                     // the elements updated: [0, flat_numel) unless sharded
  std::vector<FlatSpan> whole_;         // one per parameter, arena offsets
  std::vector<FlatSpan> spans_;         // one per parameter, inside the shard, offsets from its start
  std::vector<StateSpan> state_spans_;  // the same, with where their bf16 / int8 state lives
  int64_t steps_ = 0;
  DType dtype_ = DType::f32;
  Tensor m_;                      // (shard size) dtype_ first moment
  Tensor v_;                      // (shard size) dtype_ second moment
  Tensor c_;                      // (shard size) dtype_ Kahan compensation, 16-bit kahan only
  MasterCopy master_;             // (shard size) f32 master weights, 16-bit master rounding only
  QuantizedMomentParts mq_, vq_;  // int8 state: absmax and fp32 fallback of m and v
};

}  // namespace mixtrain
