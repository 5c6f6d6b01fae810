// TrainSummary as the JSON `mixtrain train --json` prints (train/summary_json.h).
#include "train/summary_json.h"

#include <cmath>
#include <string>

#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {

nlohmann::ordered_json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}

nlohmann::ordered_json nonzero_peaks_json(const std::array<int64_t, kNumMemCategories>& peak) {
  nlohmann::ordered_json by;
  for (size_t c = 0; c < kNumMemCategories; ++c)
    if (peak[c] > 0) by[std::string(mem_category_name(static_cast<MemCategory>(c)))] = peak[c];
  return by;
}

nlohmann::ordered_json memory_terms_json(const std::vector<MemoryTerm>& terms) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const MemoryTerm& t : terms)
    a.push_back({{"name", t.name},
                 {"category", std::string(mem_category_name(t.category))},
                 {"count", t.count},
                 {"bytes", t.bytes}});
  return a;
}

nlohmann::ordered_json breakdown_to_json(const StepBreakdown& s) {
  nlohmann::ordered_json b;
  for (size_t k = 0; k < kNumWorkKinds; ++k)
    b[std::string(work_kind_name(static_cast<WorkKind>(k)))] = s.work[k];
  b["other"] = s.other;
  b["step"] = s.step;
  return b;
}

nlohmann::ordered_json summary_to_json(const TrainSummary& r) {
  nlohmann::ordered_json j;
  j["steps"] = r.steps;
  j["final_train_loss"] = finite_or_null(r.final_train_loss);
  j["val_loss"] = finite_or_null(r.val_loss);
  j["val_accuracy"] = finite_or_null(r.val_accuracy);
  j["unigram_baseline"] = r.unigram_baseline;
  j["val_bits_per_byte"] = finite_or_null(r.val_bits_per_byte);
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_flops_per_s"] = r.model_flops_per_s;
  j["gemm_flops_per_s"] = r.gemm_flops_per_s;
  j["mfu"] = r.mfu;
  j["parameters"] = r.parameters;
  j["elapsed_s"] = r.elapsed_s;
  const MemorySnapshot& m = r.memory;
  j["peak_bytes"] = m.peak_total;
  j["peak_bytes_by_category"] = nonzero_peaks_json(m.peak);
  j["at_peak_by_category"] = nonzero_peaks_json(m.at_peak);
  // The process (tensor/memory.h): its resident peak over the run (the whole process's where Linux
  // would not restart the mark: peak_rss_from_start false) and its size beside the tensors at the start.
  const ProcessMemory& pm = r.process;
  j["peak_rss_bytes"] = pm.peak_rss_bytes >= 0 ? pm.peak_rss_bytes : process_peak_rss_bytes();
  j["peak_rss_from_start"] = pm.peak_rss_bytes >= 0 && pm.peak_from_start;
  j["fixed_rss_bytes"] =
      pm.fixed_bytes >= 0 ? nlohmann::ordered_json(pm.fixed_bytes) : nlohmann::ordered_json(nullptr);
  j["precision"] = r.precision;
  j["matmul_precision"] = r.matmul_precision;
  j["gemm"] = r.gemm;
  j["skipped_steps"] = r.skipped_steps;
  j["overflows"] = r.overflows;
  j["diverged"] = r.diverged;
  j["interrupted"] = r.interrupted;  // stopped by SIGINT / SIGTERM after step "steps"
  j["final_loss_scale"] = r.final_loss_scale;
  j["hit_min_scale"] = r.hit_min_scale;
  j["skips_by_site"] = r.skips_by_site;
  if (r.ranks > 1) {
    j["ranks"] = r.ranks;
    j["buckets_per_step"] = r.buckets_per_step;
    j["buckets_overlapped"] = r.buckets_overlapped;
    j["reduce_overlap_s_per_step"] = r.reduce_overlap_s;
    j["reduce_wait_s_per_step"] = r.reduce_wait_s;
    j["grad_reduce_bytes_per_step"] = r.reduce_bytes_per_step;
    if (r.zero_stage == 3) j["param_gather_bytes_per_step"] = r.gather_bytes_per_step;
    j["zero"] = r.zero_stage;
    // Every rank's own peaks (the tracker of each process; peak_bytes_by_category above is rank 0's).
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const auto& peaks : r.rank_peaks) ranks.push_back(nonzero_peaks_json(peaks));
    j["rank_peak_bytes_by_category"] = ranks;
  }
  if (r.profiled_steps > 0) {
    j["profiled_steps"] = r.profiled_steps;
    j["breakdown_s_per_step"] = breakdown_to_json(r.breakdown_per_step());
    j["system_allocations_per_step"] = r.system_allocations_per_step();
  }
  return j;
}

nlohmann::ordered_json step_record_json(const StepRecord& r) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = finite_or_null(r.loss);
  j["lr"] = r.lr;
  j["grad_norm"] = finite_or_null(r.grad_norm);
  j["tokens_per_s"] = r.tokens_per_s;
  j["elapsed_s"] = r.elapsed_s;
  j["loss_scale"] = r.loss_scale;
  j["skipped"] = r.skipped;
  j["found_inf"] = r.found_inf;
  return j;
}

void add_evaluation_json(nlohmann::ordered_json& j, const StepRecord& r) {
  if (!r.evaluated) return;
  j["val_loss"] = r.val_loss;
  j["val_accuracy"] = r.val_accuracy;
}

}  // namespace mixtrain
