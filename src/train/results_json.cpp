// The JSON forms of a run's results as text (mixtrain/train/results_json.h): the library's own
// forms (train/summary_json.h), dumped compactly.
#include "mixtrain/train/results_json.h"

#include "train/summary_json.h"

namespace mixtrain {

std::string summary_json_text(const TrainSummary& s) { return summary_to_json(s).dump(); }
std::string breakdown_json_text(const StepBreakdown& b) { return breakdown_to_json(b).dump(); }
std::string peaks_json_text(const std::array<int64_t, kNumMemCategories>& peak) {
  return nonzero_peaks_json(peak).dump();
}
std::string memory_terms_json_text(const std::vector<MemoryTerm>& terms) {
  return memory_terms_json(terms).dump();
}
std::string step_record_json_text(const StepRecord& r) {
  nlohmann::ordered_json j = step_record_json(r);
  add_evaluation_json(j, r);
  return j.dump();
}

}  // namespace mixtrain
