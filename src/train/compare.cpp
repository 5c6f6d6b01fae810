// One training run per precision mode, side by side (train/compare.h).
#include "mixtrain/train/compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "mixtrain/core/error.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/train/output_paths.h"
#include "mixtrain/train/tensorboard_hook.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain {
namespace {

// log.jsonl + "bf16-true" -> log.bf16-true.jsonl (a name without an extension gets it appended).
std::string with_suffix_(const std::string& path, const std::string& tag) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + "." + tag;
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

// The entry's label as a file-name part: bf16-true:kahan -> bf16-true-kahan.
std::string tag_of(const CompareEntry& e) {
  std::string tag = e.label;
  std::replace(tag.begin(), tag.end(), ':', '-');
  return tag;
}

bool has_16bit_weights(PrecisionMode m) { return precision_spec(m).param_dtype != DType::f32; }

}  // namespace

std::string compare_log_path(const std::string& log, const CompareEntry& e) {
  if (log.empty() || log == "-") return log;
  std::string tag = e.label;
  std::replace(tag.begin(), tag.end(), ':', '-');
  return with_suffix_(log, tag);
}

std::vector<CompareEntry> parse_compare_entries(std::string_view list, UpdateRounding default_rounding) {
  std::vector<CompareEntry> entries;
  std::stringstream ss{std::string(list)};
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    CompareEntry e{parse_precision(item.substr(0, colon)), default_rounding, item, std::nullopt};
    if (colon != std::string::npos && e.mode == PrecisionMode::mixed_fp8) {
      e.fp8_recipe = parse_fp8_recipe(item.substr(colon + 1));
    } else if (colon != std::string::npos) {
      e.rounding = parse_update_rounding(item.substr(colon + 1));
      if (!has_16bit_weights(e.mode))
        throw ArgumentError(item + ": an update rounding applies to 16-true and bf16-true only");
    } else if (has_16bit_weights(e.mode)) {
      e.label += ':';
      e.label += update_rounding_name(e.rounding);
    }
    for (const CompareEntry& seen : entries)
      if (seen.label == e.label) throw ArgumentError(e.label + " is listed twice");
    entries.push_back(std::move(e));
  }
  if (entries.empty()) throw ArgumentError("no precision mode listed");
  return entries;
}

CompareResult compare_precisions(const TrainOptions& base, const std::vector<CompareEntry>& entries,
                                 const std::function<void(const CompareRun&)>& on_run) {
  return compare_precisions(base, entries, on_run, train_with(base));
}

CompareResult compare_precisions(const RunOptions& base, const std::vector<CompareEntry>& entries,
                                 const std::function<void(const CompareRun&)>& on_run,
                                 const std::function<TrainSummary(const RunOptions&)>& train_fn) {
  if (entries.empty()) throw ArgumentError("compare_precisions: no entry to run");
  // Refuse used TensorBoard directories before the first run trains (train() checks its own).
  if (!base.tensorboard_dir.empty() && base.checkpoint.resume.empty())
    for (const CompareEntry& e : entries) TensorBoardHook(base.tensorboard_dir + "/" + tag_of(e), false);
  // The baseline runs first, so every row can show its speed-up as soon as it is printed.
  std::vector<CompareEntry> order = entries;
  const auto true32 = std::find_if(order.begin(), order.end(),
                                   [](const CompareEntry& e) { return e.mode == PrecisionMode::true32; });
  if (true32 != order.end()) std::rotate(order.begin(), true32, true32 + 1);
  for (CompareEntry& e : order)  // each fp8 row names its recipe (the options' own when not listed)
    if (e.mode == PrecisionMode::mixed_fp8 && !e.fp8_recipe) e.fp8_recipe = base.fp8.recipe;
  CompareResult result;
  result.baseline = order.front().label;
  result.threads = num_threads();
  // Every run's paths (its step log) checked before the first run trains.
  for (const CompareEntry& e : order) {
    RunOptions o = base;
    o.log_jsonl = compare_log_path(base.log_jsonl, e);
    o.numerics.path = compare_log_path(base.numerics.path, e);
    check_run_paths(run_paths(o));
  }
  double base_tok_s = 0;
  for (const CompareEntry& e : order) {
    RunOptions o = base;
    o.precision = e.mode;
    o.update_rounding = e.rounding;
    if (e.fp8_recipe) o.fp8.recipe = *e.fp8_recipe;
    o.quiet = true;
    o.log_jsonl = compare_log_path(base.log_jsonl, e);
    o.numerics.path = compare_log_path(base.numerics.path, e);  // one numerics log per mode
    // One TensorBoard run per mode (appended in two: GCC 12 warns, falsely).
    if (!o.tensorboard_dir.empty()) {
      o.tensorboard_dir += '/';
      o.tensorboard_dir += tag_of(e);
    }
    CompareRun run;
    run.entry = e;
    try {
      run.summary = train_fn(o);
    } catch (const DivergedError& d) {
      run.summary = d.summary;  // a result, not an error: reported in its row, the comparison goes on
    }
    if (run.summary.interrupted) {
      result.interrupted = true;
      result.stop_signal = run.summary.stop_signal;
      result.interrupted_label = e.label;
      break;
    }
    run.memory = run.summary.memory;  // this run's (its set-up reset the peaks)
    if (result.runs.empty()) base_tok_s = run.summary.tokens_per_s;
    // No speed-up for a run that diverged: its steps were skipped, which is cheap.
    run.speedup = run.summary.diverged ? NAN : base_tok_s > 0 ? run.summary.tokens_per_s / base_tok_s : 0.0;
    result.runs.push_back(run);
    if (on_run) on_run(result.runs.back());
  }
  return result;
}

}  // namespace mixtrain
