// A run's summary as JSON (internal: the public TrainSummary is a plain struct): the summary's
// fields, the memory tracker's peaks by category and the process's peak RSS, and with profiling
// the step-time breakdown per profiled step.
#pragma once
#include <nlohmann/json.hpp>

#include "mixtrain/train/training_run.h"

namespace mixtrain {

nlohmann::ordered_json summary_to_json(const TrainSummary& r);

}  // namespace mixtrain
