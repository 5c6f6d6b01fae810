// The hooks that watch a run, shared by train() and finetune() so both honour the same options:
// fault injection (--inject-nonfinite), overflow forensics, the numerics probes (with their
// TensorBoard scalars), the step log, TensorBoard and the progress output. They go after the
// checkpoint hook (which restores first and trims the logs) and before the caller's own hooks.
#pragma once
#include <string>
#include <vector>

#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

void add_observer_hooks(TrainingRun& run, const RunOptions& opt);

// --keep-fp32 for one run: autocast's keep-fp32 patterns are process-wide, so they are set for
// the run's lifetime and restored however it ends.
class KeepFp32Scope {
 public:
  explicit KeepFp32Scope(const std::vector<std::string>& patterns);
  ~KeepFp32Scope();
  KeepFp32Scope(const KeepFp32Scope&) = delete;
  KeepFp32Scope& operator=(const KeepFp32Scope&) = delete;

 private:
  std::vector<std::string> saved_;
};

}  // namespace mixtrain
