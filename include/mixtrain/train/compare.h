// `mixtrain compare` as a function: the same model trained from the same seed on the same batches
// once per precision mode (or mode and update rounding), with each run's speed, memory and
// accuracy side by side.
//
//   TrainOptions base;  // model, data, steps, ... (precision and rounding come from the entries)
//   CompareResult r = compare_precisions(base, parse_compare_entries("32-true,bf16-true:kahan"));
//   r.runs[1].summary.val_loss, r.runs[1].memory.peak_total, r.runs[1].speedup (over r.baseline)
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/amp/precision.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/train_options.h"

namespace mixtrain {

// One run of a comparison.
struct CompareEntry {
  PrecisionMode mode = PrecisionMode::true32;
  UpdateRounding rounding = UpdateRounding::nearest;  // of the 16-bit weights (*-true modes)
  // The run's name: "32-true", "bf16-true:kahan" (a *-true mode always shows its rounding).
  std::string label;
  std::optional<Fp8Recipe> fp8_recipe;  // fp8-mixed:RECIPE; unset: the run's own
};

// Parses a comma-separated list of MODE or MODE:ROUNDING ("32-true,bf16-mixed,bf16-true:kahan"),
// so one comparison can show what each update rounding of a *-true mode costs and buys; a *-true
// mode without a rounding takes `default_rounding`; fp8-mixed:RECIPE ("fp8-mixed:mxfp8") runs that
// fp8 recipe (plain fp8-mixed: the options' own). Empty items are skipped. Throws ArgumentError
// for an unknown mode or rounding, a rounding on a mode whose weights are fp32, the same run listed
// twice, or no entry at all.
std::vector<CompareEntry> parse_compare_entries(std::string_view list,
                                                UpdateRounding default_rounding = UpdateRounding::nearest);

struct CompareRun {
  CompareEntry entry;
  TrainSummary summary;   // a diverged run too (summary.diverged): a result, not an error
  MemorySnapshot memory;  // the allocator's tracker right after the run: the run's peaks
  double speedup = 0;  // tokens/s over the baseline run's (CompareResult::baseline); NaN for a diverged run
};

struct CompareResult {
  // The baseline (32-true when listed, else the first entry) runs first, the others in the
  // entries' order.
  std::vector<CompareRun> runs;
  std::string baseline;  // the label the speed-ups are relative to
  int threads = 0;       // the thread count every run used
  // A stop request (base.stop_signal) ended the comparison during the run of `interrupted_label`:
  // runs holds the modes that finished.
  bool interrupted = false;
  int stop_signal = 0;
  std::string interrupted_label;
};

// compare's step log of one entry: log.jsonl -> log.bf16-true-kahan.jsonl.
std::string compare_log_path(const std::string& log, const CompareEntry& e);

// Trains `base` once per entry (the baseline first), with the entry's precision and rounding,
// quietly; every path of every run is checked before the first trains. A step log
// (base.log_jsonl) gets the label as a suffix per run: log.jsonl -> log.bf16-true-kahan.jsonl;
// TensorBoard files (base.tensorboard_dir) go to one subdirectory per run: DIR/bf16-true-kahan/.
// `on_run` sees each run as soon as it finished (to print a row while the next one trains).
// `train_fn` trains one entry's options (the fine-tune passes a function that runs finetune(),
// train/finetune.h; the overload below, train()). Throws ArgumentError for bad options (the first
// run validates them) or no entry.
CompareResult compare_precisions(const RunOptions& base, const std::vector<CompareEntry>& entries,
                                 const std::function<void(const CompareRun&)>& on_run,
                                 const std::function<TrainSummary(const RunOptions&)>& train_fn);
// Language-model pre-training: train() with base's task options.
CompareResult compare_precisions(const TrainOptions& base, const std::vector<CompareEntry>& entries,
                                 const std::function<void(const CompareRun&)>& on_run = {});

}  // namespace mixtrain
