// lr_at: warm-up, cosine decay, Hugging Face's linear schedule, the constant cases and bad schedules.
#include "mixtrain/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using testing_optim::expect_throw;

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s{1.0f, 10, 100, 0.1f};
  EXPECT_FLOAT_EQ(lr_at(1, s), 0.1f);  // max/warmup at step 1
  EXPECT_FLOAT_EQ(lr_at(5, s), 0.5f);
  EXPECT_FLOAT_EQ(lr_at(10, s), 1.0f);  // max at step warmup
  const double r11 = 1.0 / 90.0;
  EXPECT_FLOAT_EQ(lr_at(11, s), float(0.1 + 0.5 * (1 + std::cos(std::numbers::pi * r11)) * 0.9));
  EXPECT_FLOAT_EQ(lr_at(55, s), 0.55f);  // halfway through the decay: the midpoint
  EXPECT_FLOAT_EQ(lr_at(100, s), 0.1f);  // min at total_steps
  EXPECT_FLOAT_EQ(lr_at(101, s), 0.1f);  // and after
  EXPECT_FLOAT_EQ(lr_at(100000, s), 0.1f);
  // Monotone: up during warm-up, down after.
  for (int64_t t = 1; t < 10; ++t) EXPECT_LT(lr_at(t, s), lr_at(t + 1, s));
  for (int64_t t = 10; t < 100; ++t) EXPECT_GT(lr_at(t, s), lr_at(t + 1, s));
}

TEST(LrSchedule, ConstantAndPartialForms) {
  EXPECT_EQ(lr_at(1, LrSchedule{3e-4f, 0, 0, 0.f}), 3e-4f);  // constant
  EXPECT_EQ(lr_at(1000000, LrSchedule{3e-4f, 0, 0, 0.f}), 3e-4f);
  const LrSchedule warm_only{2.0f, 4, 0, 0.f};  // warm-up then constant
  EXPECT_FLOAT_EQ(lr_at(1, warm_only), 0.5f);
  EXPECT_FLOAT_EQ(lr_at(4, warm_only), 2.0f);
  EXPECT_FLOAT_EQ(lr_at(5000, warm_only), 2.0f);
  // No warm-up: the first step gets the peak (PyTorch's CosineAnnealingLR with T_max = 9, Hugging
  // Face's get_cosine_schedule_with_warmup with no warm-up), the last one the floor.
  const LrSchedule decay_only{1.0f, 0, 10, 0.f};
  EXPECT_EQ(lr_at(1, decay_only), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(2, decay_only), float(0.5 * (1 + std::cos(std::numbers::pi / 9))));
  EXPECT_FLOAT_EQ(lr_at(5, decay_only), float(0.5 * (1 + std::cos(std::numbers::pi * 4 / 9))));
  EXPECT_FLOAT_EQ(lr_at(10, decay_only), 0.f);
  for (int64_t t = 1; t < 10; ++t) EXPECT_GT(lr_at(t, decay_only), lr_at(t + 1, decay_only));
  // The case: --lr 1e-3, 4 steps, floor 1e-4: 1e-3 first (was 8.7e-4), 1e-4 last.
  const LrSchedule four{1e-3f, 0, 4, 1e-4f};
  EXPECT_EQ(lr_at(1, four), 1e-3f);
  EXPECT_FLOAT_EQ(lr_at(2, four), float(1e-4 + 0.5 * (1 + std::cos(std::numbers::pi / 3)) * 9e-4));
  EXPECT_EQ(lr_at(4, four), 1e-4f);
  // A single step without warm-up: the peak.
  EXPECT_EQ(lr_at(1, LrSchedule{1.0f, 0, 1, 0.f}), 1.0f);
  const LrSchedule all_warm{1.0f, 10, 10, 0.1f};  // warm-up fills the whole run
  EXPECT_FLOAT_EQ(lr_at(10, all_warm), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(11, all_warm), 0.1f);
}

// Hugging Face's get_linear_schedule_with_warmup(opt, num_warmup_steps=w, num_training_steps=n),
// stepped after each optimizer step: step t gets max_lr * lambda(t - 1). The values below are
// what that LambdaLR gives for lr 1.0 (lambda(s) = s / w during warm-up, (n - s) / (n - w) after).
TEST(LrSchedule, LinearLikeHuggingFace) {
  const LrSchedule s{1.0f, 4, 20, 0.f, ScheduleKind::linear};
  EXPECT_EQ(lr_at(1, s), 0.f);          // lambda(0) = 0: Hugging Face's first step does nothing
  EXPECT_FLOAT_EQ(lr_at(2, s), 0.25f);  // lambda(1) = 1/4
  EXPECT_FLOAT_EQ(lr_at(4, s), 0.75f);
  EXPECT_EQ(lr_at(5, s), 1.0f);  // lambda(4) = (20 - 4) / 16: the peak
  EXPECT_FLOAT_EQ(lr_at(6, s), 15.f / 16.f);
  EXPECT_FLOAT_EQ(lr_at(13, s), 0.5f);        // lambda(12) = 8 / 16
  EXPECT_FLOAT_EQ(lr_at(20, s), 1.f / 16.f);  // the last step: lambda(19)
  EXPECT_EQ(lr_at(21, s), 0.f);               // decayed to 0 after it
  EXPECT_EQ(lr_at(1000, s), 0.f);
  for (int64_t t = 5; t < 21; ++t) EXPECT_GT(lr_at(t, s), lr_at(t + 1, s));
  // No warm-up (the fine-tune's default): the full rate first, then straight down.
  const LrSchedule n{5e-5f, 0, 250, 0.f, ScheduleKind::linear};
  EXPECT_EQ(lr_at(1, n), 5e-5f);
  EXPECT_FLOAT_EQ(lr_at(126, n), float(5e-5 * 125.0 / 250.0));
  EXPECT_FLOAT_EQ(lr_at(250, n), float(5e-5 / 250.0));
  // No decay (total 0): warm-up then constant; min_lr plays no part.
  const LrSchedule w{2.0f, 4, 0, 0.5f, ScheduleKind::linear};
  EXPECT_FLOAT_EQ(lr_at(3, w), 1.0f);
  EXPECT_EQ(lr_at(5, w), 2.0f);
  EXPECT_EQ(lr_at(9999, w), 2.0f);
  expect_throw<ArgumentError>([] { lr_at(1, LrSchedule{1.f, 5, 3, 0.f, ScheduleKind::linear}); });
}

TEST(LrSchedule, BadSchedulesThrow) {
  expect_throw<ArgumentError>([] { lr_at(0, LrSchedule{}); });  // steps count from 1
  expect_throw<ArgumentError>([] { lr_at(1, LrSchedule{-1.f, 0, 0, 0.f}); });
  expect_throw<ArgumentError>([] { lr_at(1, LrSchedule{1.f, 0, 0, 2.f}); });  // min > max
  expect_throw<ArgumentError>([] { lr_at(1, LrSchedule{1.f, -1, 0, 0.f}); });
  expect_throw<ArgumentError>([] { lr_at(1, LrSchedule{1.f, 10, 5, 0.f}); });  // total < warmup
  expect_throw<ArgumentError>([] { lr_at(1, LrSchedule{NAN, 0, 0, 0.f}); });
}

}  // namespace
}  // namespace mixtrain
