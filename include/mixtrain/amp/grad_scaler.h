// The dynamic loss scaler of 16-mixed training: a small explicit state machine (STYLE lesson 8).
// Same update rule as torch.amp.GradScaler (reference/amp-semantics.md, "torch.amp.GradScaler"),
// plus DeepSpeed's hysteresis and Apex/DeepSpeed's min/max bounds, all off by default.
//
// One iteration (torch's order; clipping must see unscaled gradients, pytorch/examples#1196):
//   loss * scaler.scale() -> backward -> scaler.unscale(store)   (once per store / optimizer)
//   -> clip_grad_norm (optional; sqrt(grad_sum_squares()) is the norm already)
//   -> if (!scaler.step_should_skip()) optimizer.step(store) -> scaler.update()
// Several optimizers: unscale each store once, step each, update once. Gradient accumulation
// needs nothing special: the scale only changes in update(), so it is constant across the
// micro-batches of one effective batch as long as update() runs only at the boundary.
//
// The update rule, once per iteration (found_inf = an unscaled gradient was inf/NaN):
//   if found_inf:
//       growth_tracker = 0
//       if hysteresis_left > 1: hysteresis_left -= 1              (scale kept; DeepSpeed)
//       else: scale = fp32(scale * backoff_factor), clamped up to min_scale  (-> hit_min_scale)
//   else:
//       growth_tracker += 1
//       if growth_tracker == growth_interval:
//           growth_tracker = 0; hysteresis_left = hysteresis       (refill; DeepSpeed)
//           g = min(scale * growth_factor, max_scale)              (Apex's cap)
//           if isfinite(fp32(g)): scale = fp32(g)                  (torch, pytorch#98828)
// With hysteresis = 1, min_scale = 0 and max_scale = inf this is exactly torch's
// _amp_update_scale_ (the scale is an fp32 value, each product formed in double and rounded, as
// torch's float scale tensor times a Python-float factor). The hysteresis is DeepSpeed's with
// consecutive_hysteresis=false (amp-semantics.md, "DeepSpeed"): an overflow with hysteresis left
// costs a skipped step but not the scale; once it is used up every overflow backs off, until a
// full clean growth_interval refills it (at that boundary, whether or not a cap stops the growth:
// DeepSpeed refills at every window end). Unlike DeepSpeed, reaching min_scale does not stop the
// run: the update is clamped and reported (hit_min_scale()) for the trainer to log or act on.
// With min_scale = 0 the scale still never becomes 0 (a backoff that would round to 0 is clamped
// at the smallest fp32 subnormal and reported the same way), where torch would get stuck at 0.
#pragma once
#include <cmath>
#include <concepts>
#include <cstdint>
#include <utility>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct GradScalerConfig {
  bool enabled = true;          // false: scale 1, unscale only checks, update changes nothing
  double init_scale = 65536.0;  // 2^16, as torch / Apex / DeepSpeed's initial_scale_power
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // torch 2000; DeepSpeed's loss_scale_window is 1000
  int64_t hysteresis = 1;          // 1 = torch (back off on every overflow); DeepSpeed uses 2
  double min_scale = 0.0;          // floor (DeepSpeed min_loss_scale 1); 0 = none
  double max_scale = INFINITY;     // cap on growth (Apex 2^24); inf = none
  bool dynamic = true;             // false: static scale = init_scale, never changes

  // Throws ArgumentError (one line) for growth_factor <= 1, backoff_factor outside (0, 1),
  // growth_interval < 1, hysteresis < 1, init_scale not positive and finite in fp32,
  // min_scale < 0 or not finite, max_scale <= 0 or NaN, min_scale > max_scale, init_scale
  // outside [min_scale, max_scale], or no fp32 value in [min_scale, max_scale].
  void validate() const;
};

// Everything a checkpoint must save to resume the scaler exactly (huggingface/transformers#11663).
struct GradScalerState {
  double scale = 65536.0;       // always an fp32 value
  int64_t growth_tracker = 0;   // clean iterations since the last growth / overflow
  int64_t hysteresis_left = 1;  // overflows tolerated before the next backoff (>= 1)
  int64_t overflows = 0;        // iterations with inf/NaN gradients while enabled
  int64_t skipped_steps = 0;    // iterations update() saw with found_inf (also while disabled)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerConfig config = {});  // validates the config

  const GradScalerConfig& config() const { return config_; }
  bool enabled() const { return config_.enabled; }

  // The factor the loss is multiplied by this iteration (1 when disabled).
  float scale() const { return config_.enabled ? float(state_.scale) : 1.f; }

  // Unscales a flat f32 gradient buffer in place, in one fused pass (kernels/gradient_kernels.h),
  // with inv_scale = fp32(1 / scale) formed in double, as torch. Returns found_inf for it.
  // Disabled: multiplies nothing, only checks. At most once per buffer between update()s
  // (ArgumentError, as torch's "unscale_() has already been called on this optimizer since the
  // last update()"); buffers are told apart by storage and offset. DTypeError for non-f32
  // gradients (as torch, which refuses to unscale fp16 gradients); ArgumentError if undefined.
  bool unscale(const Tensor& flat_grads);
  // The same for one part of a flat buffer that starts on a gradient-norm block boundary (ZeRO,
  // optim/zero.h), also writing each block's sum of unscaled squares to block_sums
  // (kernels/gradient_kernels.h: unscale_and_check_blocks); grad_sum_squares() does not cover it.
  bool unscale_blocks(const Tensor& part, double* block_sums);
  // The same for anything that keeps its gradients in one flat buffer, flat_grads() (nn's
  // ParameterStore: call it once per store). A template, so the scaler needs nothing above it.
  template <typename Store>
  requires requires(const Store& s) {
    { s.flat_grads() } -> std::convertible_to<const Tensor&>;
  }
  bool unscale(Store& store) { return unscale(store.flat_grads()); }

  // After unscale(): whether this iteration's optimizer steps must be skipped (any store had an
  // inf/NaN gradient). ArgumentError if nothing was unscaled since the last update().
  bool step_should_skip() const;
  // Sum over the stores unscaled this iteration (in call order) of the unscaled squared
  // gradients: sqrt() of it is grad_global_norm over them, bit for bit for a single store.
  // Meaningless when step_should_skip(). ArgumentError if nothing was unscaled.
  double grad_sum_squares() const;

  // Ends the iteration: applies the update rule above to found_inf || (anything unscale() found
  // this iteration), and forgets which stores were unscaled. Call it once per iteration, after
  // every optimizer step. The argument lets the trainer add a found_inf of its own (another
  // process, a non-finite loss). Disabled: counts skipped_steps only. Static: the scale stays.
  void update(bool found_inf);
  void update() { update(false); }

  // Events of the last update(), for the trainer to report.
  bool hit_min_scale() const { return hit_min_scale_; }  // a backoff was clamped at min_scale
  bool growth_capped() const { return growth_capped_; }  // a growth was cut by max_scale / fp32 max
  float min_scale_fp32() const { return floor_; }        // the floor backoffs are clamped at (> 0)

  // Checkpointing. load_state validates the state against the config (ArgumentError) and must be
  // called between iterations (not after unscale() and before update()).
  const GradScalerState& state() const { return state_; }
  void load_state(const GradScalerState& s);

 private:
  GradScalerConfig config_;
  GradScalerState state_;
  float floor_ = 0;  // smallest fp32 >= min_scale, and > 0
  float cap_ = 0;    // largest fp32 <= max_scale (inf when max_scale is inf)
  // This iteration (reset by update()):
  std::vector<std::pair<const Storage*, int64_t>> unscaled_;  // (storage, offset) of each buffer
  bool found_inf_ = false;
  double sum_squares_ = 0;
  // Events of the last update():
  bool hit_min_scale_ = false;
  bool growth_capped_ = false;
};

}  // namespace mixtrain
