// TensorBoard event files for a TrainingRun (train/training_run.h): the scalars of the step log,
// one Event per step, in DIR/events.out.tfevents.<seconds>.<host>.<pid> (TFRecord framing,
// Event / Summary messages of proto/), written and flushed at the end of each step so that a
// running TensorBoard shows the run as it goes.
//
// Tags: train/loss, train/lr, train/grad_norm, train/tokens_per_s, amp/loss_scale, amp/skipped
// (1 on a skipped step, else 0), amp/found_inf, amp/overflows (so far), val/loss (on evaluation
// steps), memory/<category>_mib (each category's peak so far, MiB, categories that have one).
// A non-finite loss or gradient norm is written as is (TensorBoard shows NaN / inf). With numerics
// probes on, their sampled steps add numerics_amax/<kind>/<site>:<op> (see add_scalar), and in
// fp8-mixed fp8_amax, fp8_scale (delayed), fp8_rel_error, fp8_saturated and fp8_underflow
// /<role>/<site> for each fp8 linear layer and role (input, weight, grad_output).
//
// Resuming: a run that starts after step S (a checkpoint restore) first cuts every event file
// already in DIR back to steps <= S (the records of a crashed or abandoned continuation go, as
// the step log's lines do), then writes a new file whose name sorts after the old ones, so
// TensorBoard sees each step once. A fresh run refuses a DIR that already holds event files
// (ArgumentError naming the field "tensorboard_dir"), unless `resuming` (a resumed run that found no
// checkpoint starts from step 0 and drops them).
#pragma once
#include <memory>
#include <string>

#include "mixtrain/train/training_run.h"

namespace mixtrain {

class TensorBoardHook final : public TrainingHook {
 public:
  // Checks DIR at once (so a refusal comes before anything is trained or written).
  TensorBoardHook(std::string dir, bool resuming);
  ~TensorBoardHook() override;
  void on_run_start(TrainingRun& run) override;
  void on_step_end(TrainingRun& run, const StepRecord& r) override;
  void on_run_end(TrainingRun& run, TrainSummary& s) override;

  // The event file being written (empty before on_run_start).
  const std::string& file() const;
  // Adds a scalar to the current step's event (written at its on_step_end): the numerics probes'
  // per-site amax (train/numerics_hook.h) on sampled steps.
  void add_scalar(std::string tag, float value);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixtrain
