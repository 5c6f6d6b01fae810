// MixedPrecision: the precision mode's step discipline (see the header).
#include "mixtrain/optim/mixed_precision.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/gradient_kernels.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/optim/clip.h"
#include "optim/optim_util.h"
#include "tensor/alloc_site.h"

namespace mixtrain {
namespace {

GradScalerConfig scaler_config(const PrecisionSpec& spec, GradScalerConfig c, bool force) {
  c.enabled = spec.loss_scaling || force;
  if (c.enabled && spec.grad_dtype != DType::f32)
    throw ArgumentError("loss scaling needs fp32 gradients; precision " + std::string(spec.name) +
                        " keeps 16-bit gradients (use 16-mixed or bf16-mixed)");
  return c;
}

}  // namespace

MixedPrecision::MixedPrecision(PrecisionMode precision, GradScalerConfig scaler, bool force_loss_scaling)
    : spec_(precision_spec(precision)), scaler_(scaler_config(spec_, scaler, force_loss_scaling)) {}

void MixedPrecision::backward(const autograd::Var& loss, int64_t accum_steps) {
  if (accum_steps < 1) throw ArgumentError("MixedPrecision::backward: accum_steps must be >= 1");
  // The scale goes in before anything is cast down: it seeds backward at the fp32 loss.
  loss.backward(static_cast<double>(scaler_.scale()) / static_cast<double>(accum_steps));
}

Tensor* MixedPrecision::working_copy_for(ParameterStore& store) {
  const Tensor& master = store.flat_params();
  if (!spec_.autocast || master.dtype() != DType::f32) return nullptr;
  const bool same = working_.defined() && working_arena_.storage() == master.storage() &&
                    working_arena_.offset() == master.offset() && working_arena_.numel() == master.numel();
  if (!same) {
    // The copy starts at the first parameter autocast has cast (the forward passes before this
    // first step cast every one the model uses): the parameters before it, such as an encoder's
    // embedding tables, which autocast runs in fp32, would only be copied, never read (MiniLM:
    // 11.9M of 22.7M). A parameter before it that some later forward casts is served by
    // autocast's cache, as without a working copy.
    const int64_t lowest = autocast_lowest_cast_offset(master.storage().get());
    const int64_t first =
        lowest < master.offset() || lowest >= master.offset() + master.numel() ? 0 : lowest - master.offset();
    const ScopedOp site("16-bit working copy");  // names it in memory reports
    if (store.parameters_sharded()) {
      // ZeRO-3: the copy of this rank's part only, like the masters; the rest is gathered per unit.
      const auto [b, e] = working_part(store, first);
      working_ =
          Tensor::reserved({master.numel() - first}, spec_.compute_dtype, b, e, MemCategory::parameters);
    } else {
      working_ = Tensor::empty({master.numel() - first}, spec_.compute_dtype, MemCategory::parameters);
    }
    working_arena_ = master;
    working_version_ = ~uint64_t{0};
  }
  // Elements outside the optimizer's spans (frozen parameters) are only written here.
  if (working_version_ != master.storage()->version()) {
    if (store.parameters_sharded()) {
      const auto [b, e] = working_part(store, master.numel() - working_.numel());
      working_.slice(0, b, e).copy_from(working_master().slice(0, b, e));
    } else {
      working_.copy_from(working_master());
    }
  }
  return &working_;
}

std::pair<int64_t, int64_t> MixedPrecision::working_part(const ParameterStore& store, int64_t first) {
  const auto [b, e] = store.parameter_part();
  const int64_t n = store.flat_numel() - first;
  return {std::clamp<int64_t>(b - first, 0, n), std::clamp<int64_t>(e - first, 0, n)};
}

Tensor MixedPrecision::working_master() const {
  if (!working_.defined()) return Tensor();
  const int64_t n = working_arena_.numel();
  return working_arena_.slice(0, n - working_.numel(), n);
}

StepResult MixedPrecision::prepare_step(ParameterStore& store, double max_norm) {
  ProfileScope prof(WorkKind::scaler);
  // What it must move: the gradients read (the norm, the non-finite check), written when unscaled.
  prof.moves(int64_t(store.flat_grads().nbytes()) * (scaler_.enabled() ? 2 : 1));
  StepResult r;
  r.loss_scale = scaler_.scale();
  // unscale_ before clipping (pytorch/examples#1196); without a scaler the norm pass is the
  // non-finite check.
  if (scaler_.enabled()) r.found_inf = scaler_.unscale(store);
  if (!r.found_inf) {
    r.grad_norm = max_norm > 0 ? clip_grad_norm_any_dtype(store, max_norm) : grad_norm_any_dtype(store);
    r.found_inf = !std::isfinite(r.grad_norm);
  }
  return r;
}

StepResult MixedPrecision::prepare_step_sharded(ParameterStore& store, double max_norm,
                                                const ZeroPartition& part, Communicator& world) {
  ProfileScope prof(WorkKind::scaler);
  StepResult r;
  r.loss_scale = scaler_.scale();
  const Tensor& all = store.flat_grads();
  Tensor g = optim_detail::shard_view(all, part.mine());
  prof.moves(int64_t(g.nbytes()) * (scaler_.enabled() ? 2 : 1));  // as prepare_step's, this rank's part
  const bool meta = all.is_meta();
  const int64_t first = part.first_block(part.rank), total = part.total_blocks();
  // Every rank's block sums, gathered: the whole buffer's, in block order.
  auto gather = [&](void* sums, size_t elem) {
    std::vector<int64_t> bytes;
    for (int k = 0; k < part.ranks(); ++k) bytes.push_back(part.blocks(k) * static_cast<int64_t>(elem));
    world.all_gather(sums, bytes);
  };
  double norm = 0;
  if (all.dtype() == DType::f32) {
    std::vector<double> sums(static_cast<size_t>(total), 0.0);
    // Without a scaler the unscale pass only reads (inv_scale 1): the non-finite check and the norm.
    r.found_inf = scaler_.unscale_blocks(g, sums.data() + first);
    if (!meta) gather(sums.data(), sizeof(double));
    norm = std::sqrt(sum_block_sums(sums.data(), total));
  } else {  // 16-bit gradients (the *-true modes): no scaler, the norm is the non-finite check
    std::vector<float> sums(static_cast<size_t>(total), 0.f);
    if (!meta) {
      sum_squares_blocks_16(g.raw_data(), g.dtype(), g.numel(), sums.data() + first);
      gather(sums.data(), sizeof(float));
    }
    norm = std::sqrt(combine_sum_squares_blocks_16(sums.data(), total));
  }
  r.found_inf = r.found_inf || !std::isfinite(norm);
  if (r.found_inf) return r;  // grad_norm stays NaN, as prepare_step's
  r.grad_norm = norm;
  // clip_grad_norm's rule (optim/clip.h), applied to this rank's part.
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0 && !meta) scale(g, static_cast<float>(coef), g);
  }
  return r;
}

}  // namespace mixtrain
