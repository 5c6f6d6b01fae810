// fp8-mixed's part of a run (amp/fp8.h): the delayed recipe's amax histories updated after each
// optimizer step, the ranks' amaxes reduced with max first (as Transformer Engine reduces them over
// its amax reduction group), and a skipped step's amaxes dropped with the step.
#pragma once
#include <memory>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

class Communicator;

class Fp8UpdateHook : public TrainingHook {
 public:
  Fp8UpdateHook(Fp8State& state, Communicator* world) : state_(state), world_(world) {}
  void reduce_gradients(TrainingRun&, int64_t step) override;
  void after_update(TrainingRun&, const StepRecord& r) override;

 private:
  Fp8State& state_;
  Communicator* world_;
};

}  // namespace mixtrain
