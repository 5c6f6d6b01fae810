// Predicted and measured memory of a training run (train/memory_report.h).
#include "mixtrain/train/memory_report.h"

#include <cmath>
#include <string>

#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/train/recipe.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain {

double relative_error(int64_t predicted, int64_t measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : NAN;
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

MemoryReport task_memory_report(const RunOptions& opt, bool predict_only, int ranks,
                                const MemoryTaskRun& run) {
  if (ranks < 1) throw ArgumentError({"ranks"}, "ranks must be >= 1, got " + std::to_string(ranks));
  const int world_size = opt.world != nullptr ? opt.world->size() : 1;
  if (!predict_only && world_size > 1 && world_size != ranks)
    throw ArgumentError({"ranks"}, "ranks " + std::to_string(ranks) + " differs from the " +
                                       std::to_string(world_size) + " ranks this run was started with");
  MemoryReport r;
  // Rank 0's memory in a run of `ranks`: collectives that move nothing (nothing holds data on meta).
  MetaWorld meta_world(0, ranks);
  RunOptions predicted = measured_run_options(opt);
  predicted.world = ranks > 1 ? &meta_world : nullptr;
  TrainSummary predicted_summary;
  r.predicted = predict_memory([&] { predicted_summary = run(predicted); });
  r.predicted.parameters = predicted_summary.parameters;
  if (predict_only) return r;

  // The measurement: a real run with the same options (quiet, no MFU measurement).
  RunOptions o = opt;
  o.quiet = true;
  o.measure_gemm_rate = false;
  MeasuredMemory m;
  try {
    m.peaks = run(o).memory;
  } catch (const DivergedError& e) {
    m.peaks = e.summary.memory;  // the steps ran; their memory is what is asked for
  }
  m.process_peak_rss_bytes = process_peak_rss_bytes();
  m.peak_error = relative_error(r.predicted.peak_bytes, m.peaks.peak_total);
  for (size_t c = 0; c < kNumMemCategories; ++c)
    m.error_by_category[c] = relative_error(r.predicted.peak_by_category[c], m.peaks.peak[c]);
  r.measured = m;
  return r;
}

MemoryReport memory_report(const TrainOptions& opt, bool predict_only, int ranks) {
  if (!predict_only) opt.validate();
  const GptConfig model = opt.model.empty() && !opt.checkpoint.init_from.empty()
                              ? gpt_config_of(opt.checkpoint.init_from, nullptr)
                              : GptConfig::from_preset_or_file(opt.model);
  MemoryReport r = task_memory_report(opt, predict_only, ranks, train_with(opt));
  r.model = model;
  r.seq_len = opt.seq_len.value_or(model.block_size);
  return r;
}

}  // namespace mixtrain
