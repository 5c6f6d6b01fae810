// One training run per precision mode, side by side (train/compare.h).
#include "mixtrain/train/compare.h"

#include <algorithm>
#include <sstream>

#include "mixtrain/core/error.h"
#include "kernels/backend.h"
#include "mixtrain/train/tensorboard_hook.h"

namespace mixtrain {
namespace {

// log.jsonl + "bf16-true" -> log.bf16-true.jsonl (a name without an extension gets it appended).
std::string with_suffix(const std::string& path, const std::string& tag) {
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

std::vector<CompareEntry> parse_compare_entries(std::string_view list, UpdateRounding default_rounding) {
  std::vector<CompareEntry> entries;
  std::stringstream ss{std::string(list)};
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    CompareEntry e{parse_precision(item.substr(0, colon)), default_rounding, item};
    if (colon != std::string::npos) {
      e.rounding = parse_update_rounding(item.substr(colon + 1));
      if (!has_16bit_weights(e.mode))
        throw ArgumentError(item + ": an update rounding applies to 16-true and bf16-true only");
    } else if (has_16bit_weights(e.mode)) {
      e.label += ':';
      e.label += update_rounding_name(e.rounding);
    }
    entries.push_back(std::move(e));
  }
  if (entries.empty()) throw ArgumentError("no precision mode listed");
  return entries;
}

CompareResult compare_precisions(const TrainOptions& base, const std::vector<CompareEntry>& entries,
                                 const std::function<void(const CompareRun&)>& on_run) {
  if (entries.empty()) throw ArgumentError("compare_precisions: no entry to run");
  // Refuse used TensorBoard directories before the first run trains (train() checks its own).
  if (!base.tensorboard_dir.empty() && base.checkpoint.resume.empty())
    for (const CompareEntry& e : entries) TensorBoardHook(base.tensorboard_dir + "/" + tag_of(e), false);
  CompareResult result;
  result.threads = num_threads();
  double base_tok_s = 0;  // the latest 32-true run's
  for (const CompareEntry& e : entries) {
    TrainOptions o = base;
    o.precision = e.mode;
    o.update_rounding = e.rounding;
    o.quiet = true;
    std::string tag = e.label;
    std::replace(tag.begin(), tag.end(), ':', '-');
    if (!o.log_jsonl.empty()) o.log_jsonl = with_suffix(o.log_jsonl, tag);
    if (!o.tensorboard_dir.empty()) o.tensorboard_dir += "/" + tag;  // one TensorBoard run per mode
    CompareRun run;
    run.entry = e;
    try {
      run.summary = train(o);
    } catch (const DivergedError& d) {
      run.summary = d.summary;  // a result, not an error: reported in its row, the comparison goes on
    }
    run.memory = MemoryTracker::global().snapshot();  // train() reset the peaks: they are this run's
    if (e.mode == PrecisionMode::true32) base_tok_s = run.summary.tokens_per_s;
    if (base_tok_s > 0) run.speedup_vs_32_true = run.summary.tokens_per_s / base_tok_s;
    result.runs.push_back(run);
    if (on_run) on_run(result.runs.back());
  }
  return result;
}

}  // namespace mixtrain
