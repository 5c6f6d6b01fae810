// The training engine: one TrainingRun owns the loop over optimizer steps for any Model,
// Optimizer and DataSource under one MixedPrecision, and everything around the loop (logs, the
// progress bar, fault injection, checkpoints, profiling, later gradient all-reduce and numerics
// probes) attaches as a TrainingHook instead of being written into it.
//
// One step (step()):
//   hooks.on_step_begin
//   zero grads; for each of grad_accum micro-batches: batch -> forward under autocast -> loss
//     (a non-finite loss ends the micro-batch loop: the step is skipped) -> backward(loss * scale / K)
//   hooks.after_backward                       (only when every loss was finite)
//   unscale + non-finite check + clip -> optimizer step unless non-finite -> scaler update
//   counters (skipped, overflows, non-finite losses in a row, minimum scale reached)
//   hooks.after_update                         (the step's time is final here)
// The loop (run()):
//   hooks.on_run_start (a checkpoint hook restores here and sets the start step)
//   for each step: step(); a diverged step goes to hooks.on_step_end and throws DivergedError;
//     evaluation when due; hooks.on_step_end; stop when any hook's should_stop says so
//   final evaluation and the summary; hooks.on_run_end
//
//   Gpt model(cfg, seed, mp.param_dtype(), mp.grad_dtype());
//   auto opt = make_optimizer(model.params(), {.lr = 1e-3f});
//   LmWindows data(corpus, 16, 128, seed);
//   TrainingRun run(model, *opt, mp, data, RunConfig{.steps = 200});
//   run.add_hook(std::make_unique<MyLogger>());
//   TrainSummary s = run.run();
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/models/model.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/optim/schedule.h"

namespace mixtrain {

struct RunConfig {
  int64_t steps = 200;          // the last optimizer step
  LrSchedule schedule;          // the learning rate at each step (optim/schedule.h)
  double grad_clip = 1.0;       // global gradient norm limit; 0 disables
  int64_t grad_accum = 1;       // micro-batches per optimizer step
  uint64_t seed = 1337;         // the dropout stream (the data source has its own)
  int64_t eval_every = 0;       // evaluate every N steps (and always after the last); 0: only then
  int64_t eval_batches = 8;     // evaluation batches, spread evenly over the data source's; 0: all
  int64_t max_bad_steps = 20;   // non-finite losses in a row before the run is declared diverged
  void validate() const;        // ArgumentError naming the field
};

// The profiled steps' time per step: each kind of work, "other" (the rest of the step: autograd
// bookkeeping, the data batch, logging) and the whole step, in seconds.
struct StepBreakdown {
  std::array<double, kNumWorkKinds> work{};
  double other = 0;
  double step = 0;
};

struct TrainSummary {
  int64_t steps = 0;
  double final_train_loss = 0;
  double val_loss = 0;
  double val_accuracy = 0;         // top-1 accuracy of the final evaluation (Model::evaluate_batch)
  double unigram_baseline = 0;     // the data source's baseline loss (byte frequencies for text)
  double tokens_per_s = 0;
  double model_flops_per_s = 0;
  double gemm_flops_per_s = 0;     // measured on this machine for the model's dtype
  double mfu = 0;
  int64_t parameters = 0;
  double elapsed_s = 0;
  std::string precision = "32-true";
  int64_t skipped_steps = 0;       // optimizer steps not applied (non-finite gradients or loss)
  int64_t overflows = 0;           // steps whose gradients held inf/NaN
  bool diverged = false;
  double final_loss_scale = 1.0;
  bool hit_min_scale = false;      // the loss scale was clamped at its minimum at least once
  // A stop request (InterruptHook, train/run_hooks.h) ended the run after step `steps`.
  bool interrupted = false;
  int stop_signal = 0;             // the signal that asked for it (SIGINT, SIGTERM)
  std::string checkpoint_path;     // the newest checkpoint this run saved ("" for none)
  // With profiling (ProfileHook): the profiled (steady-state) steps only.
  int64_t profiled_steps = 0;
  double profiled_seconds = 0;                 // their total step time
  std::array<double, kNumWorkKinds> breakdown{};  // seconds per kind of work over them
  int64_t profiled_system_allocations = 0;     // blocks taken from the system during them
  StepBreakdown breakdown_per_step() const;    // zeros without profiled steps
  double system_allocations_per_step() const;  // 0 without profiled steps
};

// The loss stayed non-finite for max_bad_steps steps in a row: the run stops; the step log up to
// there is kept, and the summary (with diverged = true) travels in the exception.
class DivergedError : public Error {
 public:
  DivergedError(int64_t step, double loss, int64_t bad_steps, TrainSummary summary);
  int64_t step;
  TrainSummary summary;
};

// What one optimizer step did.
struct StepRecord {
  int64_t step = 0;
  double loss = NAN;            // mean over the micro-batches (NaN / inf when non-finite)
  float lr = 0;
  double grad_norm = NAN;       // of the unscaled gradients, before clipping (NaN when skipped)
  double loss_scale = 1.0;      // the scale this step's losses were multiplied by
  bool loss_finite = true;
  bool found_inf = false;       // a gradient (or the loss) was non-finite
  bool skipped = false;         // the optimizer step was not applied
  bool diverged = false;        // this step ended the run (max_bad_steps non-finite losses in a row)
  double seconds = 0;           // the step's wall time (forward, backward, update)
  int64_t tokens = 0;           // tokens the step's batches held (Batch::real_tokens: no padding)
  double tokens_per_s = 0;      // tokens / seconds
  double elapsed_s = 0;         // since run() started
  bool evaluated = false;       // val_loss holds an evaluation made after this step
  double val_loss = NAN;
  double val_accuracy = NAN;    // with val_loss: top-1 accuracy over the evaluation targets
};

class TrainingRun;

// Everything around the loop. Hooks run in the order they were added.
class TrainingHook {
 public:
  virtual ~TrainingHook() = default;
  virtual void on_run_start(TrainingRun&) {}
  virtual void on_step_begin(TrainingRun&, int64_t /*step*/) {}
  virtual void after_backward(TrainingRun&, int64_t /*step*/) {}
  virtual void after_update(TrainingRun&, const StepRecord&) {}
  virtual void on_step_end(TrainingRun&, const StepRecord&) {}
  virtual bool should_stop(TrainingRun&, const StepRecord&) { return false; }
  virtual void on_run_end(TrainingRun&, TrainSummary&) {}
};

class TrainingRun {
 public:
  // The model's store must be finalized with mp's dtypes and the optimizer built on it. All four
  // must outlive the run.
  TrainingRun(Model& model, Optimizer& optimizer, MixedPrecision& mp, const DataSource& data, RunConfig config);

  template <typename H>
  H& add_hook(std::unique_ptr<H> hook) {
    H& ref = *hook;
    hooks_.push_back(std::move(hook));
    return ref;
  }

  TrainSummary run();  // steps start_step()+1 .. config().steps
  StepRecord step();   // the next optimizer step
  // Mean loss and top-1 accuracy over config().eval_batches evaluation batches (all of them when
  // 0), with no grad, under autocast.
  struct Evaluation {
    double loss = NAN;
    double accuracy = NAN;
  };
  Evaluation evaluate();

  Model& model() { return model_; }
  Optimizer& optimizer() { return optimizer_; }
  MixedPrecision& mp() { return mp_; }
  const DataSource& data() const { return data_; }
  const RunConfig& config() const { return config_; }
  TrainSummary& summary() { return summary_; }   // counters live here while running
  int64_t& bad_in_a_row() { return bad_in_a_row_; }
  int64_t completed_steps() const { return step_; }
  int64_t start_step() const { return start_step_; }
  // Continue after `step` (a checkpoint restore, in on_run_start).
  void set_start_step(int64_t step);
  // The most tokens an optimizer step can hold: batch_size * sequence_length * grad_accum. Rates
  // count the tokens actually read (StepRecord::tokens), which is less with padding.
  int64_t tokens_per_step() const;

 private:
  void finish_summary();

  Model& model_;
  Optimizer& optimizer_;
  MixedPrecision& mp_;
  const DataSource& data_;
  RunConfig config_;
  std::vector<std::unique_ptr<TrainingHook>> hooks_;
  TrainSummary summary_;
  int64_t step_ = 0;          // completed optimizer steps
  int64_t start_step_ = 0;
  int64_t bad_in_a_row_ = 0;  // consecutive non-finite losses
  double train_time_ = 0;     // seconds inside step() since the start
  int64_t train_tokens_ = 0;  // tokens read by step() since the start
  double run_start_ = 0;      // steady-clock seconds at run()
  Batch batch_;               // the training batch, reused
};

}  // namespace mixtrain
