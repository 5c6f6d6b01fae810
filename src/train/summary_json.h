// The JSON forms of a run's results (internal: the public structs are plain). summary_to_json: the
// summary's fields, the memory tracker's peaks by category and the process's peak RSS, and with
// profiling the step-time breakdown per profiled step.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

nlohmann::ordered_json summary_to_json(const TrainSummary& r);

// The step time by kind of work, "other" and "step" (seconds per profiled step).
nlohmann::ordered_json breakdown_to_json(const StepBreakdown& b);
// The categories with a non-zero peak: {"parameters": bytes, ...} (mem_category_name order).
nlohmann::ordered_json nonzero_peaks_json(const std::array<int64_t, kNumMemCategories>& peak);
// What is alive at a predicted peak (train/memory_prediction.h), largest first:
// [{"name", "category", "count", "bytes"}, ...].
nlohmann::ordered_json memory_terms_json(const std::vector<MemoryTerm>& terms);
// JSON has no inf or NaN: a non-finite number becomes null.
nlohmann::ordered_json finite_or_null(double v);

// A step's fields of the step log (--log-jsonl, run_hooks.h): step, loss, lr, grad_norm,
// tokens_per_s, elapsed_s, loss_scale, skipped, found_inf; add_evaluation_json adds val_loss and
// val_accuracy when the step was evaluated. The report's curves read the same fields.
nlohmann::ordered_json step_record_json(const StepRecord& r);
void add_evaluation_json(nlohmann::ordered_json& j, const StepRecord& r);

}  // namespace mixtrain
