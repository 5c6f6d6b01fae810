// The fp8 part of `mixtrain numerics --advise` (train/numerics_advice.h): a hook that, on every
// step of the 32-true probe run, quantizes each fp8 candidate's input, weight and output gradient
// on the side by every recipe (the GEMMs stay fp32: the trajectory is the run's own) and adds how
// well each cast kept its tensor to the site's stats.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/train/fp8_advice.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

class Fp8AdviceProbe;

class Fp8AdviceHook final : public TrainingHook {
 public:
  // cfg: the run's fp8 options (the delayed recipe's history length, reduction and margin);
  // *out: the measurements, in model order, updated after each step (it outlives the run, which
  // owns the hook, and holds the steps before a divergence).
  Fp8AdviceHook(const Fp8Config& cfg, std::shared_ptr<std::vector<Fp8SiteAdvice>> out);
  ~Fp8AdviceHook() override;
  // Added after the numerics hook: its probe, installed at step begin, is teed through this one.
  void on_run_start(TrainingRun& run) override;
  void on_step_begin(TrainingRun& run, int64_t step) override;
  void after_backward(TrainingRun& run, int64_t step) override;
  void after_update(TrainingRun& run, const StepRecord& r) override;

 private:
  std::unique_ptr<Fp8AdviceProbe> probe_;
  std::shared_ptr<std::vector<Fp8SiteAdvice>> out_;
};

}  // namespace mixtrain
