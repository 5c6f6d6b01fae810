// The JSON forms of a run's results (internal: the public structs are plain). summary_to_json: the
// summary's fields, the memory tracker's peaks by category and the process's peak RSS, and with
// profiling the step-time breakdown per profiled step.
#pragma once
#include <nlohmann/json.hpp>

#include "mixtrain/train/training_run.h"

namespace mixtrain {

nlohmann::ordered_json summary_to_json(const TrainSummary& r);

// The step time by kind of work, "other" and "step" (seconds per profiled step).
nlohmann::ordered_json breakdown_to_json(const StepBreakdown& b);
// JSON has no inf or NaN: a non-finite number becomes null.
nlohmann::ordered_json finite_or_null(double v);

}  // namespace mixtrain
