// The JSON forms of a run's results, as text: one compact JSON value each, the same fields the
// step log, `--json` and the report use (the library's own code builds them from
// train/summary_json.h). A program that writes or combines them parses the text with its own JSON
// library; no JSON type crosses the public API.
//
//   std::string j = summary_json_text(train(options));   // {"steps": ..., "val_loss": ..., ...}
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

// The summary's fields, the memory tracker's peaks by category, the peak RSS and, with
// profiling, the step-time breakdown (a JSON object).
std::string summary_json_text(const TrainSummary& s);
// The step time by kind of work, "other" and "step", in seconds per profiled step.
std::string breakdown_json_text(const StepBreakdown& b);
// The categories with a non-zero peak: {"parameters": bytes, ...}.
std::string peaks_json_text(const std::array<int64_t, kNumMemCategories>& peak);
// What is alive at a predicted peak, largest first: [{"name", "category", "count", "bytes"}, ...].
std::string memory_terms_json_text(const std::vector<MemoryTerm>& terms);
// A step's line of the step log (step, loss, lr, grad_norm, ..., val_loss and val_accuracy when
// the step was evaluated), without the run's running counters.
std::string step_record_json_text(const StepRecord& r);

}  // namespace mixtrain
