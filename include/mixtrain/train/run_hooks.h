// The hooks `mixtrain train` attaches to its TrainingRun (train/training_run.h): the JSONL step
// log, the progress output, fault injection and the step-time profile. Checkpoints are a hook
// too (train/checkpointing.h).
#pragma once
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/train/training_run.h"

namespace mixtrain {

class OutputStream;  // train/output_paths.h

// One JSON line per step, each written and flushed whole, so a run that stops keeps every
// completed step: {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "loss_scale",
// "skipped", "found_inf", "overflows"} plus "overflow_site" and "scale_event" when set (StepRecord),
// "val_loss" and "val_accuracy" after an evaluation, or "error" and
// "diverged" on the step that ended the run. A resumed run keeps the log's lines up to its start
// step and appends. "-" is stdout; a device or FIFO is written through. A write that fails (a
// full disk) stops the run with IoError naming the file: the lines before it stay.
class StepLogHook final : public TrainingHook {
 public:
  explicit StepLogHook(std::string path);
  ~StepLogHook() override;
  void on_run_start(TrainingRun& run) override;
  void on_step_end(TrainingRun& run, const StepRecord& r) override;
  void on_run_end(TrainingRun& run, TrainSummary& s) override;

 private:
  std::string path_;
  std::unique_ptr<OutputStream> f_;
};

// Stops the run when `*signal` becomes non-zero (a SIGINT/SIGTERM handler stores the signal
// number; nothing else happens in the handler). The flag is read once per step, in on_step_end,
// and latched into the summary (interrupted, stop_signal) before any hook's should_stop, so the
// checkpoint hook saves at exactly the step where the run stops.
class InterruptHook final : public TrainingHook {
 public:
  explicit InterruptHook(const volatile std::sig_atomic_t* signal) : signal_(signal) {}
  void on_step_end(TrainingRun& run, const StepRecord& r) override;
  bool should_stop(TrainingRun& run, const StepRecord& r) override;

 private:
  const volatile std::sig_atomic_t* signal_;
};

// Plain-text progress on stdout: a bar redrawn in place on a terminal, one line every
// `every` steps otherwise (logs, CI); intermediate evaluations, skipped steps and changes of the
// loss scale (with their reason) get a line.
// The bar shows the elapsed time and an estimate of the time left (from this run's mean step
// time so far).
class ProgressHook final : public TrainingHook {
 public:
  ProgressHook(int64_t every, bool quiet);
  void on_run_start(TrainingRun& run) override;
  void on_step_end(TrainingRun& run, const StepRecord& r) override;

 private:
  void line(const std::string& text) const;
  int64_t every_;
  bool quiet_, tty_;
  double step_seconds_ = 0;  // sum of this run's step times
  int64_t steps_timed_ = 0;
};

// After backward at the listed optimizer steps (from 1), the first gradient element becomes inf
// (NaN at every second listed step): the step must be skipped, never applied.
class FaultInjectionHook final : public TrainingHook {
 public:
  // rank: the data-parallel rank to poison (-1: every rank).
  explicit FaultInjectionHook(std::vector<int64_t> steps, int rank = -1)
      : steps_(std::move(steps)), rank_(rank) {}
  void after_backward(TrainingRun& run, int64_t step) override;

 private:
  std::vector<int64_t> steps_;
  int rank_;
};

// The step-time breakdown (core/profiler.h) over the steps after the first `warmup` ones (which
// create GEMM primitives and fill the allocator's cache), into the summary's profiled_* fields.
class ProfileHook final : public TrainingHook {
 public:
  explicit ProfileHook(int64_t warmup) : warmup_(warmup) {}
  void on_step_begin(TrainingRun& run, int64_t step) override;
  void after_update(TrainingRun& run, const StepRecord& r) override;

 private:
  bool profiled(const TrainingRun& run, int64_t step) const { return step > run.start_step() + warmup_; }
  int64_t warmup_;
  int64_t allocations_before_ = 0;
};

}  // namespace mixtrain
