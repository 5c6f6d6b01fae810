// Predicted and measured memory of a training run (train/memory_report.h).
#include "mixtrain/train/memory_report.h"

#include <cmath>
#include <string>

namespace mixtrain {

double relative_error(int64_t predicted, int64_t measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : NAN;
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

MemoryReport memory_report(const TrainOptions& opt, bool predict_only, int ranks) {
  if (ranks < 1) throw ArgumentError({"ranks"}, "ranks must be >= 1, got " + std::to_string(ranks));
  const int world_size = opt.world != nullptr ? opt.world->size() : 1;
  if (!predict_only && world_size > 1 && world_size != ranks)
    throw ArgumentError({"ranks"}, "ranks " + std::to_string(ranks) + " differs from the " +
                                       std::to_string(world_size) + " ranks this run was started with");
  MemoryReport r;
  r.model = GptConfig::from_preset_or_file(opt.model);
  r.seq_len = opt.seq_len > 0 ? opt.seq_len : r.model.block_size;
  // Rank 0's memory in a run of `ranks`: collectives that move nothing (nothing holds data on meta).
  MetaWorld meta_world(0, ranks);
  TrainOptions predicted = opt;
  predicted.world = ranks > 1 ? &meta_world : nullptr;
  r.predicted = predict_train_memory(predicted);
  if (predict_only) return r;

  // The measurement: a real run of train() with the same options (quiet, no MFU measurement).
  opt.validate();
  TrainOptions o = opt;
  o.quiet = true;
  o.measure_gemm_rate = false;
  try {
    train(o);
  } catch (const DivergedError&) {
    // The steps ran; their memory is what is asked for.
  }
  MeasuredMemory m;
  m.peaks = MemoryTracker::global().snapshot();
  m.process_peak_rss_bytes = process_peak_rss_bytes();
  m.peak_error = relative_error(r.predicted.peak_bytes, m.peaks.peak_total);
  for (size_t c = 0; c < kNumMemCategories; ++c)
    m.error_by_category[c] = relative_error(r.predicted.peak_by_category[c], m.peaks.peak[c]);
  r.measured = m;
  return r;
}

}  // namespace mixtrain
