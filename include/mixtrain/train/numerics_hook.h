// Numerics diagnostics as hooks of a TrainingRun (train/training_run.h):
// - NumericsHook: every `every` steps, per named site (each op's forward output and the gradient
//   its backward receives, by module path; each parameter's weight, weight gradient and
//   optimizer update), how the values fit fp16, bf16 and fp8 E4M3/E5M2 (amax, subnormal, flushed
//   to zero, overflow, exact zeros; for updates, the share below half an ulp of their weight).
//   One JSON line per site per sampled step (README "Numerics diagnostics" has the schema).
//   Steps not sampled run without a probe installed; probes only read: the trajectory is the same.
// - OverflowForensicsHook: a step skipped for a non-finite loss or gradient is re-run under a
//   probe that names the first op, in forward then backward order, whose output went non-finite
//   (StepRecord::overflow_site and overflow_detail: the progress line of the skipped step, the
//   step log, the divergence error).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/train/training_run.h"

namespace mixtrain {

class OutputStream;
class SiteTable;
class SiteProbe;
struct SiteStats;

struct NumericsOptions {
  std::string path;         // JSONL output; "-" stdout; empty: none (TrainOptions: no probes; a hook
                            // given an on_sample callback still probes)
  int64_t every = 1;        // sample steps 1, 1 + every, 1 + 2 * every, ...
  bool histograms = false;  // also the exponent histogram of each weight gradient (the advice)
  void validate(bool need_path = true) const;  // ArgumentError naming numerics.every / numerics.path
};

class NumericsHook final : public TrainingHook {
 public:
  // on_sample (optional) sees each sampled step's sites after they are written (TensorBoard's
  // per-site amax, `mixtrain numerics --advise`).
  using SampleFn = std::function<void(int64_t step, const std::vector<SiteStats>&)>;
  explicit NumericsHook(NumericsOptions options, SampleFn on_sample = {});
  ~NumericsHook() override;
  bool sampled(int64_t step) const { return (step - 1) % options_.every == 0; }
  void on_run_start(TrainingRun& run) override;
  void on_step_begin(TrainingRun& run, int64_t step) override;
  void after_backward(TrainingRun& run, int64_t step) override;
  void after_update(TrainingRun& run, const StepRecord& r) override;
  void on_run_end(TrainingRun& run, TrainSummary& s) override;

 private:
  NumericsOptions options_;
  SampleFn on_sample_;
  std::unique_ptr<OutputStream> out_;
  std::unique_ptr<SiteTable> table_;
  std::unique_ptr<SiteProbe> probe_;
  bool active_ = false;        // this step is sampled (the probe is installed until after backward)
  std::vector<float> before_;  // the flat parameters before the optimizer step, fp32
};

class OverflowForensicsHook final : public TrainingHook {
 public:
  void on_nonfinite(TrainingRun& run, StepRecord& r) override;
};

}  // namespace mixtrain
