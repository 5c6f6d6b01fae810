// GradScaler: config checks, the fp32 bounds, unscale through the fused kernel, and the update
// rule written out in amp/grad_scaler.h.
#include "mixtrain/amp/grad_scaler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/optimizer_ops.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

namespace {

std::string fmt(double v) {  // shortest round-trip form, for messages
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// The fields named let the CLI print its flags instead (--growth-factor for growth_factor).
[[noreturn]] void bad_config(std::vector<std::string> fields, const std::string& what) {
  throw ArgumentError(std::move(fields), "GradScalerConfig: " + what);
}

// Smallest fp32 >= min_scale, and never 0 (so a backoff cannot reach 0 and stick there).
float scale_floor(double min_scale) {
  float f = float(min_scale);
  if (double(f) < min_scale) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return std::max(f, std::numeric_limits<float>::denorm_min());
}

// Largest fp32 <= max_scale (inf stays inf: no cap).
float scale_cap(double max_scale) {
  if (std::isinf(max_scale)) return std::numeric_limits<float>::infinity();
  float c = float(max_scale);
  if (double(c) > max_scale) c = std::nextafter(c, 0.f);
  return c;
}

}  // namespace

void GradScalerConfig::validate() const {
  if (!(growth_factor > 1.0) || !std::isfinite(growth_factor))
    bad_config({"growth_factor"}, "growth_factor must be > 1 and finite, got " + fmt(growth_factor));
  if (!(backoff_factor > 0.0 && backoff_factor < 1.0))
    bad_config({"backoff_factor"}, "backoff_factor must be in (0, 1), got " + fmt(backoff_factor));
  if (growth_interval < 1)
    bad_config({"growth_interval"}, "growth_interval must be >= 1, got " + std::to_string(growth_interval));
  if (hysteresis < 1)
    bad_config({"hysteresis"}, "hysteresis must be >= 1, got " + std::to_string(hysteresis));
  if (!(init_scale > 0.0) || !std::isfinite(float(init_scale)) || float(init_scale) == 0.f)
    bad_config({"init_scale"}, "init_scale must be > 0 and finite in fp32, got " + fmt(init_scale));
  if (!(min_scale >= 0.0) || !std::isfinite(min_scale))
    bad_config({"min_scale"}, "min_scale must be >= 0 and finite, got " + fmt(min_scale));
  if (!(max_scale > 0.0)) bad_config({"max_scale"}, "max_scale must be > 0, got " + fmt(max_scale));
  if (min_scale > max_scale)
    bad_config({"min_scale", "max_scale"},
               "min_scale " + fmt(min_scale) + " is greater than max_scale " + fmt(max_scale));
  if (init_scale < min_scale || init_scale > max_scale)
    bad_config({"init_scale", "min_scale", "max_scale"}, "init_scale " + fmt(init_scale) +
                                                             " is outside [min_scale, max_scale] = [" +
                                                             fmt(min_scale) + ", " + fmt(max_scale) + "]");
  if (scale_floor(min_scale) > scale_cap(max_scale))
    bad_config({"min_scale", "max_scale"}, "no fp32 value lies in [min_scale, max_scale] = [" +
                                               fmt(min_scale) + ", " + fmt(max_scale) + "]");
}

GradScaler::GradScaler(GradScalerConfig config) : config_(config) {
  config_.validate();
  floor_ = scale_floor(config_.min_scale);
  cap_ = scale_cap(config_.max_scale);
  // The scale is an fp32 value (torch keeps it in a float tensor).
  state_.scale = std::clamp(float(config_.init_scale), floor_, cap_);
  state_.hysteresis_left = config_.hysteresis;
}

bool GradScaler::unscale(const Tensor& flat_grads) {
  if (!flat_grads.defined())
    throw ArgumentError(
        "GradScaler::unscale: the gradients are undefined (is the parameter store finalized?)");
  Tensor g = flat_grads;
  if (g.dtype() != DType::f32)
    throw DTypeError("GradScaler::unscale: gradients must be f32, got " + g.to_string() + " (unscaling " +
                     std::string(dtype_name(g.dtype())) + " gradients is refused, as torch.amp.GradScaler)");
  const std::pair<const Storage*, int64_t> id{g.storage().get(), g.offset()};
  if (std::find(unscaled_.begin(), unscaled_.end(), id) != unscaled_.end())
    throw ArgumentError(
        "GradScaler::unscale: unscale() has already been called on these gradients since the last update()");
  // torch: inv_scale = scale.double().reciprocal().float(); disabled: 1, i.e. check only.
  const float inv_scale = config_.enabled ? float(1.0 / state_.scale) : 1.f;
  const UnscaleResult r = ops::unscale_and_check(g.device(), g, inv_scale);
  unscaled_.push_back(id);
  found_inf_ = found_inf_ || r.found_inf;
  sum_squares_ += r.sum_squares;
  return r.found_inf;
}

bool GradScaler::unscale_blocks(const Tensor& part, double* block_sums) {
  if (!part.defined() || part.dtype() != DType::f32 || !part.is_contiguous())
    throw DTypeError("GradScaler::unscale_blocks: the part must be contiguous f32 gradients");
  const std::pair<const Storage*, int64_t> id{part.storage().get(), part.offset()};
  if (std::find(unscaled_.begin(), unscaled_.end(), id) != unscaled_.end())
    throw ArgumentError(
        "GradScaler::unscale_blocks: unscale() has already been called on these gradients since the last "
        "update()");
  const float inv_scale = config_.enabled ? float(1.0 / state_.scale) : 1.f;
  bool found = false;
  if (!part.is_meta())
    found =
        unscale_and_check_blocks(const_cast<float*>(part.data<float>()), part.numel(), inv_scale, block_sums);
  unscaled_.push_back(id);
  found_inf_ = found_inf_ || found;
  return found;
}

bool GradScaler::step_should_skip() const {
  if (unscaled_.empty())
    throw ArgumentError(
        "GradScaler::step_should_skip: unscale() has not been called since the last update()");
  return found_inf_;
}

double GradScaler::grad_sum_squares() const {
  if (unscaled_.empty())
    throw ArgumentError(
        "GradScaler::grad_sum_squares: unscale() has not been called since the last update()");
  return sum_squares_;
}

void GradScaler::update(bool found_inf) {
  const bool inf = found_inf || found_inf_;
  unscaled_.clear();
  found_inf_ = false;
  sum_squares_ = 0;
  hit_min_scale_ = false;
  growth_capped_ = false;

  if (inf) ++state_.skipped_steps;
  if (!config_.enabled) return;
  if (inf) ++state_.overflows;
  if (!config_.dynamic) return;

  if (inf) {
    state_.growth_tracker = 0;
    if (state_.hysteresis_left > 1) {  // DeepSpeed: spend one unit of hysteresis, keep the scale
      --state_.hysteresis_left;
      return;
    }
    float next = float(state_.scale * config_.backoff_factor);
    if (!(next >= floor_)) {  // below min_scale, or rounded to 0
      next = floor_;
      hit_min_scale_ = true;
    }
    state_.scale = next;
    return;
  }
  if (++state_.growth_tracker < config_.growth_interval) return;
  state_.growth_tracker = 0;
  state_.hysteresis_left = config_.hysteresis;  // DeepSpeed (consecutive_hysteresis=false)
  const double wanted = state_.scale * config_.growth_factor;
  const float next = float(std::min(wanted, double(cap_)));
  if (std::isfinite(next)) state_.scale = next;  // never past fp32 max (pytorch#98828)
  growth_capped_ = double(cap_) < wanted || !std::isfinite(next);
}

void GradScaler::load_state(const GradScalerState& s) {
  if (!unscaled_.empty())
    throw ArgumentError(
        "GradScaler::load_state: called between unscale() and update(); load it between iterations");
  const auto bad = [](const std::string& what) { throw ArgumentError("GradScaler::load_state: " + what); };
  if (!(s.scale > 0.0) || !std::isfinite(s.scale) || double(float(s.scale)) != s.scale)
    bad("scale must be a positive finite fp32 value, got " + fmt(s.scale));
  if (s.scale < double(floor_) || s.scale > double(cap_))
    bad("scale " + fmt(s.scale) + " is outside [min_scale, max_scale] = [" + fmt(config_.min_scale) + ", " +
        fmt(config_.max_scale) + "]");
  if (s.growth_tracker < 0 || s.growth_tracker >= config_.growth_interval)
    bad("growth_tracker must be in [0, growth_interval = " + std::to_string(config_.growth_interval) +
        "), got " + std::to_string(s.growth_tracker));
  if (s.hysteresis_left < 1 || s.hysteresis_left > config_.hysteresis)
    bad("hysteresis_left must be in [1, hysteresis = " + std::to_string(config_.hysteresis) + "], got " +
        std::to_string(s.hysteresis_left));
  if (s.overflows < 0 || s.skipped_steps < 0)
    bad("overflows and skipped_steps must be >= 0, got " + std::to_string(s.overflows) + " and " +
        std::to_string(s.skipped_steps));
  state_ = s;
  hit_min_scale_ = false;
  growth_capped_ = false;
}

}  // namespace mixtrain
