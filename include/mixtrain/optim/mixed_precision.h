// One object that gives a model a precision mode, the way Lightning Fabric does with one string:
// it owns the mode's autocast settings, the loss scaler and the step discipline
//   forward under autocast -> backward of the scaled loss -> unscale -> clip -> step or skip
//   -> scaler update
// (torch.amp semantics, shared/reference/amp-semantics.md). It lives in optim, above amp: it
// drives an optimizer over a parameter store (nn) with amp's pieces (autocast, GradScaler, the
// precision specs), which themselves know nothing of either. The fp32 master weights of the mixed
// modes are the ParameterStore itself (finalized with param_dtype()). Before the first step
// autocast casts them down per op and caches the casts; from then on the optimizer writes a
// 16-bit working copy of the masters in the same pass as the update (optim/working_copy.h),
// owned here, and forward() hands it to autocast, so no weight is cast again.
//
//   MixedPrecision mp("16-mixed");
//   store.finalize(mp.param_dtype(), mp.grad_dtype());
//   AdamW opt(store, {});
//   auto loss = mp.forward([&] { return model(x, y); });   // autocast region
//   mp.backward(loss);                                      // loss * scale
//   StepResult r = mp.step(opt, store, lr, /*max_norm=*/1.0);  // skipped if inf/NaN
#pragma once
#include <cmath>
#include <string_view>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/amp/precision.h"
#include "mixtrain/autograd/variable.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/clip.h"  // grad_norm_any_dtype, clip_grad_norm_any_dtype
#include "mixtrain/optim/zero.h"  // ZeroPartition

namespace mixtrain {

struct StepResult {
  bool applied = false;     // the optimizer step ran
  bool found_inf = false;   // a gradient held inf/NaN (the step was skipped)
  double grad_norm = NAN;   // global norm of the unscaled gradients (NaN when found_inf)
  double loss_scale = 1.0;  // the scale this iteration's loss was multiplied by
};

class MixedPrecision {
 public:
  // precision: "32-true", "16-mixed", "bf16-mixed", "16-true" or "bf16-true". The scaler runs
  // when the mode uses one (16-mixed) or when force_loss_scaling is set (mixed modes only).
  explicit MixedPrecision(PrecisionMode precision, GradScalerConfig scaler = {},
                          bool force_loss_scaling = false);
  explicit MixedPrecision(std::string_view precision, GradScalerConfig scaler = {},
                          bool force_loss_scaling = false)
      : MixedPrecision(parse_precision(precision), scaler, force_loss_scaling) {}

  const PrecisionSpec& spec() const { return spec_; }
  DType param_dtype() const { return spec_.param_dtype; }
  DType grad_dtype() const { return spec_.grad_dtype; }
  GradScaler& scaler() { return scaler_; }
  const GradScaler& scaler() const { return scaler_; }

  // Runs f() (forward pass and loss) under the mode's autocast.
  template <typename F>
  auto forward(F&& f) {
    AutocastScope scope(spec_.autocast, spec_.compute_dtype);
    WorkingCopyScope working(working_master(), working_version_, working_);
    return f();
  }
  // Backpropagates loss * scale / accum_steps (one call per micro-batch; the scale stays the same
  // until step()).
  void backward(const autograd::Var& loss, int64_t accum_steps = 1);

  // Unscales (when scaling), clips the global norm to max_norm (0: no clipping), steps the
  // optimizer unless a gradient is non-finite, and updates the scaler. Works for any optimizer
  // with step(ParameterStore&, float lr).
  // Optimizers take step(store, lr, Tensor* working_copy).
  template <typename Optimizer>
  StepResult step(Optimizer& opt, ParameterStore& store, float lr, double max_norm = 0) {
    StepResult r = prepare_step(store, max_norm);
    if (!r.found_inf) apply_step(opt, store, lr);
    r.applied = !r.found_inf;
    scaler_.update(r.found_inf);
    return r;
  }

  // The first half of step(): unscale, non-finite check, clipping. For callers that drive the
  // optimizer themselves; they must then call scaler().update(result.found_inf).
  StepResult prepare_step(ParameterStore& store, double max_norm);
  // prepare_step under ZeRO (optim/zero.h), where this rank holds the summed gradients of its
  // part (part.mine()) only: unscales and checks that part, forms the global norm from every
  // rank's per-block sums of squares (gathered and added in block order, so it is
  // prepare_step's norm of the whole summed buffer bit for bit, on every rank) and clips the
  // part. A collective: every rank calls it, whatever its gradients hold. found_inf is set when
  // the norm is not finite (on every rank alike) or this rank's part held inf/NaN.
  StepResult prepare_step_sharded(ParameterStore& store, double max_norm, const ZeroPartition& part,
                                  Communicator& world);

  // The optimizer step itself (for callers of prepare_step): writes the working copy in the
  // mixed modes.
  template <typename Optimizer>
  void apply_step(Optimizer& opt, ParameterStore& store, float lr) {
    Tensor* working = working_copy_for(store);
    opt.step(store, lr, working);
    if (working) working_version_ = store.flat_params().storage()->version();
  }

  // ZeRO-3 (train/param_shards.h): the working copy made before the first forward pass, of the
  // whole arena (this rank's part written from the masters), so that step 1's forward reads it too
  // instead of caching a cast of every weight for the step. Nothing outside the *-mixed modes.
  void prepare_working_copy(ParameterStore& store) {
    if (working_copy_for(store) != nullptr) working_version_ = store.flat_params().storage()->version();
  }

  // The 16-bit working copy of the masters from the first parameter autocast cast to the arena's
  // end (undefined before the first step and outside the *-mixed modes), charged to
  // MemCategory::parameters.
  const Tensor& working_copy() const { return working_; }

 private:
  // The working copy for this store's next optimizer step, (re)made from the masters when it
  // does not exist yet or the masters changed since the optimizer last wrote it; null when the
  // mode keeps none.
  Tensor* working_copy_for(ParameterStore& store);
  // ZeRO-3: the elements of a working copy of the arena from `first` on that hold this rank's part.
  static std::pair<int64_t, int64_t> working_part(const ParameterStore& store, int64_t first);
  // The part of the fp32 arena the copy mirrors: its last working_.numel() elements, from the
  // first parameter autocast casts (undefined without a copy).
  Tensor working_master() const;

  const PrecisionSpec& spec_;
  GradScaler scaler_;
  Tensor working_;        // flat, spec_.compute_dtype
  Tensor working_arena_;  // the whole fp32 arena, whose end the copy mirrors
  uint64_t working_version_ = 0;
};

}  // namespace mixtrain
