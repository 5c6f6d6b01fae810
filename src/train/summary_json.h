// The JSON forms of a run's results (internal: the public structs are plain). summary_to_json: the
// summary's fields, the memory tracker's peaks by category and the process's peak RSS, and with
// profiling the step-time breakdown per profiled step.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

nlohmann::ordered_json summary_to_json(const TrainSummary& r);

// The step time by kind of work, "other" and "step" (seconds per profiled step).
nlohmann::ordered_json breakdown_to_json(const StepBreakdown& b);
// The categories with a non-zero peak: {"parameters": bytes, ...} (mem_category_name order).
nlohmann::ordered_json nonzero_peaks_json(const std::array<int64_t, kNumMemCategories>& peak);
// JSON has no inf or NaN: a non-finite number becomes null.
nlohmann::ordered_json finite_or_null(double v);

}  // namespace mixtrain
