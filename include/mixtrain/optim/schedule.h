// The learning-rate schedule, two kinds. The optimizer step is counted from 1 (the value t of
// the update the rate is used for).
//
// ScheduleKind::cosine: linear warm-up then cosine decay, as nanoGPT's get_lr.
//
//   step <= warmup_steps:            lr = max_lr * step / warmup_steps
//                                    (max_lr/warmup at step 1, max_lr at step warmup_steps)
//   total_steps == 0 (no decay):     lr = max_lr after the warm-up (constant if warmup is 0 too)
//   peak = max(warmup_steps, 1):     the step that gets max_lr (step 1 without warm-up)
//   peak < step <= total_steps:      r = (step - peak) / (total - peak)
//                                    lr = min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr)
//                                    (min_lr exactly at step total_steps)
//   step > total_steps:              lr = min_lr
// Without warm-up this is torch.optim.lr_scheduler.CosineAnnealingLR(T_max = total - 1,
// eta_min = min_lr) stepped after each optimizer step: the first step gets the peak, as in
// PyTorch and Hugging Face's get_cosine_schedule_with_warmup (not a decayed rate).
//
// ScheduleKind::linear: Hugging Face's get_linear_schedule_with_warmup (the Trainer's default),
// a LambdaLR stepped after each optimizer step, so step t uses lambda(s) with s = t - 1:
//   s < warmup_steps:                lr = max_lr * s / warmup_steps   (0 at step 1 with warm-up)
//   total_steps == 0 (no decay):     lr = max_lr after the warm-up
//   otherwise:                       lr = max_lr * max(0, (total - s) / (total - warmup))
//                                    (max_lr / (total - warmup) at step total, 0 after it;
//                                    min_lr is not used)
// Computed in double, returned rounded to float.
#pragma once
#include <cstdint>

namespace mixtrain {

enum class ScheduleKind { cosine, linear };

struct LrSchedule {
  float max_lr = 1e-3f;
  int64_t warmup_steps = 0;  // 0: no warm-up
  int64_t total_steps = 0;   // 0: no decay; otherwise >= warmup_steps
  float min_lr = 0.f;        // the floor of the decay, <= max_lr
  ScheduleKind kind = ScheduleKind::cosine;
};

// Throws ArgumentError (one line) unless 0 <= min_lr <= max_lr (finite), warmup_steps >= 0,
// total_steps >= 0, and total_steps == 0 or total_steps >= warmup_steps.
void validate(const LrSchedule& schedule);

// The learning rate for optimizer step `step` (>= 1; ArgumentError otherwise). Validates.
float lr_at(int64_t step, const LrSchedule& schedule);

}  // namespace mixtrain
