// compare_precisions and parse_compare_entries (train/compare.h): the list syntax and its errors,
// and that each run of a comparison is the run train() makes alone in that mode.
#include "mixtrain/train/compare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_test_util.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/train/trainer.h"
#include "tiny_run.h"

namespace mixtrain {
namespace {

using testing_ckpt::expect_error;

std::vector<std::string> labels(const std::vector<CompareEntry>& entries) {
  std::vector<std::string> out;
  for (const CompareEntry& e : entries) out.push_back(e.label);
  return out;
}

TEST(ParseCompareEntries, ModesRoundingsAndLabels) {
  const std::vector<CompareEntry> e = parse_compare_entries(
      "32-true,16-mixed,,bf16-true,bf16-true:kahan,16-true:stochastic", UpdateRounding::nearest);
  ASSERT_EQ(e.size(), 5u);  // the empty item is skipped
  EXPECT_EQ(labels(e), (std::vector<std::string>{"32-true", "16-mixed", "bf16-true:nearest",
                                                 "bf16-true:kahan", "16-true:stochastic"}));
  EXPECT_EQ(e[0].mode, PrecisionMode::true32);
  EXPECT_EQ(e[1].mode, PrecisionMode::mixed16);
  EXPECT_EQ(e[2].mode, PrecisionMode::true_bf16);
  EXPECT_EQ(e[2].rounding, UpdateRounding::nearest);
  EXPECT_EQ(e[3].rounding, UpdateRounding::kahan);
  EXPECT_EQ(e[4].mode, PrecisionMode::true16);
  EXPECT_EQ(e[4].rounding, UpdateRounding::stochastic);
}

TEST(ParseCompareEntries, ADefaultRoundingGoesToTheTrueModesWithoutOne) {
  const std::vector<CompareEntry> e =
      parse_compare_entries("bf16-mixed,bf16-true,16-true:nearest", UpdateRounding::kahan);
  EXPECT_EQ(labels(e), (std::vector<std::string>{"bf16-mixed", "bf16-true:kahan", "16-true:nearest"}));
  EXPECT_EQ(e[1].rounding, UpdateRounding::kahan);
  EXPECT_EQ(e[2].rounding, UpdateRounding::nearest);
}

TEST(ParseCompareEntries, BadListsNameTheItem) {
  expect_error<ArgumentError>([] { parse_compare_entries("32-true,fp4"); }, {"unknown precision 'fp4'"});
  expect_error<ArgumentError>([] { parse_compare_entries("bf16-true:up"); },
                              {"unknown update rounding 'up'"});
  expect_error<ArgumentError>([] { parse_compare_entries("32-true:kahan"); },
                              {"32-true:kahan", "16-true and bf16-true only"});
  expect_error<ArgumentError>([] { parse_compare_entries("bf16-mixed:stochastic"); },
                              {"bf16-mixed:stochastic"});
  expect_error<ArgumentError>([] { parse_compare_entries(",,"); }, {"no precision mode"});
  expect_error<ArgumentError>([] { parse_compare_entries(""); }, {"no precision mode"});
}

TEST(ComparePrecisions, EachRunIsTheRunTrainMakesAloneAnd32TrueIsTheBaselineRunFirst) {
  const TrainOptions base = train_test::tiny_run();
  const std::vector<CompareEntry> entries = parse_compare_entries("bf16-mixed,32-true,bf16-true:kahan");
  std::vector<std::string> seen;
  const CompareResult r =
      compare_precisions(base, entries, [&](const CompareRun& run) { seen.push_back(run.entry.label); });
  EXPECT_EQ(seen, (std::vector<std::string>{"32-true", "bf16-mixed", "bf16-true:kahan"}));
  EXPECT_EQ(r.baseline, "32-true");
  EXPECT_EQ(r.threads, num_threads());
  ASSERT_EQ(r.runs.size(), 3u);

  for (const CompareRun& run : r.runs) {
    SCOPED_TRACE(run.entry.label);
    TrainOptions o = base;
    o.precision = run.entry.mode;
    o.update_rounding = run.entry.rounding;
    const TrainSummary alone = train(o);
    const MemorySnapshot mem = MemoryTracker::global().snapshot();
    EXPECT_EQ(run.summary.precision, precision_spec(run.entry.mode).name);
    EXPECT_EQ(run.summary.steps, 2);
    EXPECT_EQ(run.summary.final_train_loss, alone.final_train_loss);  // same seed, same batches: bit for bit
    EXPECT_EQ(run.summary.val_loss, alone.val_loss);
    EXPECT_EQ(run.memory.peak_total, mem.peak_total);  // the run's own peaks, not an earlier run's
    EXPECT_EQ(run.memory.peak, mem.peak);
    EXPECT_GT(run.summary.tokens_per_s, 0);
  }
  // The fp32 masters are bf16-mixed's alone; 32-true's weights are its parameters.
  EXPECT_GT(r.runs[1].memory.peak[static_cast<size_t>(MemCategory::master_weights)], 0);
  EXPECT_EQ(r.runs[0].memory.peak[static_cast<size_t>(MemCategory::master_weights)], 0);

  EXPECT_EQ(r.runs[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(r.runs[2].speedup, r.runs[2].summary.tokens_per_s / r.runs[0].summary.tokens_per_s);
}

TEST(ComparePrecisions, WithoutA32TrueRunTheFirstListedIsTheBaseline) {
  const CompareResult r =
      compare_precisions(train_test::tiny_run(), parse_compare_entries("bf16-mixed,16-mixed"));
  EXPECT_EQ(r.baseline, "bf16-mixed");
  ASSERT_EQ(r.runs.size(), 2u);
  EXPECT_EQ(r.runs[0].speedup, 1.0);
  EXPECT_GT(r.runs[1].speedup, 0.0);
}

TEST(ComparePrecisions, ADuplicatedRunIsRefused) {
  expect_error<ArgumentError>([] { parse_compare_entries("32-true,bf16-mixed,32-true"); },
                              {"32-true is listed twice"});
}

TEST(ComparePrecisions, StepLogsGetTheLabelAsASuffix) {
  testing_ckpt::TempDir dir;
  TrainOptions base = train_test::tiny_run();
  base.log_jsonl = dir / "log.jsonl";
  compare_precisions(base, parse_compare_entries("32-true,bf16-true:kahan"));
  for (const std::string name : {"log.32-true.jsonl", "log.bf16-true-kahan.jsonl"}) {
    std::ifstream f(dir / name);
    ASSERT_TRUE(f) << name << " was not written";
    int lines = 0;
    for (std::string line; std::getline(f, line);) ++lines;
    EXPECT_EQ(lines, 2) << name;  // one line per step
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "log.jsonl"));
}

TEST(ComparePrecisions, ADivergedRunIsARowNotAnError) {
  TrainOptions base = train_test::tiny_run();
  base.steps = 6;
  base.lr = 1e30f;
  base.grad_clip = 0;
  base.max_bad_steps = 2;
  const CompareResult r = compare_precisions(base, parse_compare_entries("32-true,bf16-mixed"));
  ASSERT_EQ(r.runs.size(), 2u);
  for (const CompareRun& run : r.runs) {
    EXPECT_TRUE(run.summary.diverged) << run.entry.label;
    EXPECT_GT(run.summary.tokens_per_s, 0) << run.entry.label;
  }
}

TEST(ComparePrecisions, BadInputThrows) {
  EXPECT_THROW(compare_precisions(train_test::tiny_run(), {}), ArgumentError);
  TrainOptions bad = train_test::tiny_run();
  bad.model = "gpt-huge";
  expect_error<ArgumentError>([&] { compare_precisions(bad, parse_compare_entries("32-true")); },
                              {"gpt-huge"});
}

}  // namespace
}  // namespace mixtrain
