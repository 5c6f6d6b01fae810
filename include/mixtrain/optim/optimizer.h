// The optimizer interface the training engine drives: one step over a flat parameter arena, the
// state it keeps (tensors and bytes) and its save / restore for checkpoints. AdamW and SGD
// implement it (optim/adamw.h, optim/sgd.h); make_optimizer() builds one from an OptimizerKind
// and one OptimizerConfig, so no caller compares optimizer names.
//
//   std::unique_ptr<Optimizer> opt = make_optimizer(store, {.kind = OptimizerKind::sgd, .momentum = 0.9f});
//   mp.step(*opt, store, lr, max_norm);   // optim/mixed_precision.h
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>

#include "mixtrain/kernels/optimizer_kernels.h"  // UpdateRounding
#include "mixtrain/kernels/state_kernels.h"      // StatePrecision
#include "mixtrain/nn/parameters.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

enum class OptimizerKind : uint8_t { adamw, sgd };
// "adamw" | "sgd"; ArgumentError "unknown optimizer 'x' (valid: adamw, sgd)".
OptimizerKind parse_optimizer_kind(std::string_view s);
std::string_view optimizer_kind_name(OptimizerKind k);

// The hyper-parameters of every optimizer; each reads its own (AdamW: betas, eps; SGD: momentum,
// dampening, nesterov), both read lr, weight_decay, rounding and seed.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-3f;
  float weight_decay = 1e-2f;
  float beta1 = 0.9f;     // adamw
  float beta2 = 0.999f;   // adamw
  float eps = 1e-8f;      // adamw
  float momentum = 0.f;   // sgd
  float dampening = 0.f;  // sgd
  bool nesterov = false;  // sgd
  // 16-bit stores only: how the new parameter is rounded back, and the stochastic-rounding stream.
  UpdateRounding rounding = UpdateRounding::nearest;
  uint64_t seed = 0;
  // How the moments are stored (`--optim-state`, kernels/state_kernels.h): fp32, bf16 with
  // stochastic rounding, or bitsandbytes' block-wise 8 bits. bf16 and int8 need fp32 parameters.
  StatePrecision state = StatePrecision::fp32;
};

// A contiguous range [begin, end) of the flat arena's elements: the part of it an optimizer
// updates and keeps state for. ZeRO (optim/zero.h) gives each rank one; the default (end < 0)
// stands for the whole arena.
struct FlatRange {
  int64_t begin = 0;
  int64_t end = -1;
  int64_t size() const { return end - begin; }
  // This range for an arena of flat_numel elements: the whole arena for the default;
  // ArgumentError unless 0 <= begin <= end <= flat_numel.
  FlatRange resolved(int64_t flat_numel) const;
};

// The parts of an int8 moment besides its codes (kernels/state_kernels.h): the absmax of each
// block and the fp32 state of the tensors too small to quantize.
struct QuantizedMomentParts {
  Tensor absmax, fallback;
};

// What a checkpoint keeps of an optimizer (checkpoint/training_state.h stores it).
struct OptimizerState {
  OptimizerKind kind = OptimizerKind::adamw;
  int64_t steps = 0;  // updates applied (AdamW's t; skipped steps do not count)
  // The moments' storage: fp32 and bf16 moments are plain buffers (f32 / bf16); int8 moments keep
  // their codes' bit patterns (i8) in exp_avg / exp_avg_sq / momentum_buffer and the rest in *_q.
  StatePrecision state_precision = StatePrecision::fp32;
  Tensor exp_avg, exp_avg_sq;                                // adamw
  Tensor momentum_buffer;                                    // sgd; undefined when momentum == 0
  QuantizedMomentParts exp_avg_q, exp_avg_sq_q, momentum_q;  // int8 state only
  Tensor compensation;                                       // undefined unless 16-bit kahan rounding
  Tensor master;  // fp32 master weights; undefined unless 16-bit master rounding
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual OptimizerKind kind() const = 0;
  // One update with learning rate lr, then bumps the parameters' storage version. `working`
  // (fp32 stores only; may be null): the 16-bit working copy to write in the same pass
  // (optim/working_copy.h).
  virtual void step(ParameterStore& store, float lr, Tensor* working = nullptr) = 0;
  virtual int64_t steps() const = 0;      // updates done so far
  virtual DType param_dtype() const = 0;  // f32, bf16 or f16
  // The moments' dtype: param_dtype(), except f32 under master rounding of 16-bit parameters.
  virtual DType state_dtype() const = 0;
  // Bytes of optimizer state, the fp32 master weights of master rounding included (ZeRO's
  // "optimizer states": what stage 1 shards).
  virtual int64_t state_bytes() const = 0;
  // Checkpoints: the state as it is now (tensors shared, not copied), and its restore. restore()
  // throws ArgumentError naming what does not fit (another optimizer's state, a missing or
  // unexpected buffer) and ShapeError for a wrong length; values are cast to state_dtype().
  // The state's buffers have the length of shard() (the whole arena unless sharded); restore()
  // also takes whole-arena buffers and keeps the shard's elements.
  virtual OptimizerState state() const = 0;
  virtual void restore(const OptimizerState& s) = 0;
  // The elements of the flat arena this optimizer updates and keeps state for.
  virtual FlatRange shard() const = 0;
};

// AdamW or SGD for this store's layout and dtype (ArgumentError for invalid hyper-parameters),
// updating and keeping state for `shard` of the arena only (default: all of it).
std::unique_ptr<Optimizer> make_optimizer(const ParameterStore& store, const OptimizerConfig& config,
                                          FlatRange shard = {});

}  // namespace mixtrain
