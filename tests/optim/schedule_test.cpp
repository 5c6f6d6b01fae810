// lr_at: warm-up, cosine decay, the constant cases and bad schedules.
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
  EXPECT_FLOAT_EQ(lr_at(1, s), 0.1f);   // max/warmup at step 1
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
