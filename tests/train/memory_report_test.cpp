// memory_report (train/memory_report.h): the prediction is predict_train_memory's for the options,
// the measurement is the tracker's over the run, and the errors are computed from the two.
#include "mixtrain/train/memory_report.h"

#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/checkpoint_test_util.h"
#include "mixtrain/train/trainer.h"
#include "tiny_run.h"

namespace mixtrain {
namespace {

TEST(RelativeError, OfThePredictionAgainstTheMeasurement) {
  EXPECT_EQ(relative_error(110, 100), 0.1);
  EXPECT_EQ(relative_error(75, 100), -0.25);
  EXPECT_EQ(relative_error(100, 100), 0.0);
  EXPECT_EQ(relative_error(0, 0), 0.0);           // nothing predicted, nothing measured
  EXPECT_TRUE(std::isnan(relative_error(5, 0)));  // no relative error against nothing
}

TEST(MemoryReport, PredictOnlyIsThePredictorsAnswerAndTrainsNothing) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_bf16);
  o.seq_len.reset();  // the model's block size
  const int64_t cpu_allocations = MemoryTracker::global().snapshot().allocations;
  const MemoryReport r = memory_report(o, /*predict_only=*/true);
  EXPECT_EQ(MemoryTracker::global().snapshot().allocations, cpu_allocations);  // nothing real allocated
  EXPECT_FALSE(r.measured.has_value());
  EXPECT_EQ(r.model.name, "gpt-nano");
  EXPECT_EQ(r.seq_len, 128);
  const MemoryPrediction p = predict_train_memory(o);
  EXPECT_EQ(r.predicted.peak_bytes, p.peak_bytes);
  EXPECT_EQ(r.predicted.peak_by_category, p.peak_by_category);
  EXPECT_EQ(r.predicted.peak_moment, p.peak_moment);
  EXPECT_EQ(r.predicted.parameters, p.parameters);
}

TEST(MemoryReport, MeasuredPeaksAreTheRunsAndTheErrorsComeFromThem) {
  const TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_bf16);
  const MemoryReport r = memory_report(o, /*predict_only=*/false);
  EXPECT_EQ(r.seq_len, 16);
  ASSERT_TRUE(r.measured.has_value());
  const MeasuredMemory& m = *r.measured;
  // Nothing has run since: the tracker still holds the report's run's peaks.
  const MemorySnapshot now = MemoryTracker::global().snapshot();
  EXPECT_EQ(m.peaks.peak_total, now.peak_total);
  EXPECT_EQ(m.peaks.peak, now.peak);
  EXPECT_GT(m.peaks.peak[static_cast<size_t>(MemCategory::master_weights)], 0);
  EXPECT_GE(m.process_peak_rss_bytes, m.peaks.peak_total);

  EXPECT_EQ(m.peak_error, relative_error(r.predicted.peak_bytes, m.peaks.peak_total));
  for (size_t c = 0; c < kNumMemCategories; ++c) {
    const double e = relative_error(r.predicted.peak_by_category[c], m.peaks.peak[c]);
    if (std::isnan(e))
      EXPECT_TRUE(std::isnan(m.error_by_category[c])) << c;
    else
      EXPECT_EQ(m.error_by_category[c], e) << c;
  }
  // The prediction is this run on the meta device: the same bytes (memory_prediction_test.cpp).
  EXPECT_EQ(m.peak_error, 0.0);
}

TEST(MemoryReport, ADivergingRunIsStillMeasured) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::true32);
  o.steps = 4;
  o.lr = 1e30f;
  o.grad_clip = 0;
  ASSERT_THROW(train(o), DivergedError);
  const MemoryReport r = memory_report(o, /*predict_only=*/false);
  ASSERT_TRUE(r.measured.has_value());
  EXPECT_GT(r.measured->peaks.peak_total, 0);
}

TEST(MemoryReport, BadOptionsThrow) {
  TrainOptions o = train_test::tiny_run();
  o.model = "gpt-huge";
  testing_ckpt::expect_error<ArgumentError>([&] { memory_report(o, true); },
                                            {"unknown model preset 'gpt-huge'"});
  o = train_test::tiny_run();
  o.seq_len = 129;
  testing_ckpt::expect_error<ArgumentError>([&] { memory_report(o, true); }, {"block_size"});
  o = train_test::tiny_run();
  o.steps = 0;  // measuring needs a run
  testing_ckpt::expect_error<ArgumentError>([&] { memory_report(o, false); }, {"steps"});
}

}  // namespace
}  // namespace mixtrain
