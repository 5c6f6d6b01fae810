// lr_at: linear warm-up + cosine decay, or Hugging Face's linear warm-up + linear decay (see schedule.h).
#include "mixtrain/optim/schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "mixtrain/core/error.h"
#include "optim/optim_util.h"

namespace mixtrain {

void validate(const LrSchedule& s) {
  using optim_detail::fmt;
  optim_detail::check_nonneg("LrSchedule", "max_lr", s.max_lr);
  optim_detail::check_nonneg("LrSchedule", "min_lr", s.min_lr);
  if (s.min_lr > s.max_lr)
    throw ArgumentError("LrSchedule: min_lr (" + fmt(s.min_lr) + ") must be <= max_lr (" + fmt(s.max_lr) +
                        ")");
  if (s.warmup_steps < 0)
    throw ArgumentError("LrSchedule: warmup_steps must be >= 0, got " + std::to_string(s.warmup_steps));
  if (s.total_steps < 0)
    throw ArgumentError("LrSchedule: total_steps must be >= 0, got " + std::to_string(s.total_steps));
  if (s.total_steps != 0 && s.total_steps < s.warmup_steps)
    throw ArgumentError("LrSchedule: total_steps (" + std::to_string(s.total_steps) +
                        ") must be 0 or >= warmup_steps (" + std::to_string(s.warmup_steps) + ")");
}

float lr_at(int64_t step, const LrSchedule& s) {
  validate(s);
  if (step < 1) throw ArgumentError("lr_at: step counts from 1, got " + std::to_string(step));
  const double max_lr = s.max_lr, min_lr = s.min_lr;
  if (s.kind == ScheduleKind::linear) {
    const int64_t t = step - 1;  // how many times Hugging Face's scheduler has stepped
    if (t < s.warmup_steps) return float(max_lr * double(t) / double(s.warmup_steps));
    if (s.total_steps == 0) return s.max_lr;
    if (t >= s.total_steps) return 0.f;
    // Here warmup <= t < total, so total - warmup > 0.
    return float(max_lr * double(s.total_steps - t) / double(s.total_steps - s.warmup_steps));
  }
  if (step <= s.warmup_steps) return float(max_lr * double(step) / double(s.warmup_steps));
  if (s.total_steps == 0) return s.max_lr;
  // The peak step: the last warm-up step, or step 1 without warm-up (as PyTorch's and Hugging
  // Face's schedules give the first optimizer step the full rate).
  const int64_t peak = s.warmup_steps > 0 ? s.warmup_steps : 1;
  if (step <= peak) return s.max_lr;
  if (step >= s.total_steps) return s.min_lr;
  // Here peak < step < total, so total - peak > 0.
  const double r = double(step - peak) / double(s.total_steps - peak);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  return float(min_lr + coeff * (max_lr - min_lr));
}

}  // namespace mixtrain
