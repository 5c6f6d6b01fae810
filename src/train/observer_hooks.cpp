// The hooks that watch a run (train/observer_hooks.h).
#include "train/observer_hooks.h"

#include <memory>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/train/numerics_hook.h"
#include "mixtrain/train/run_hooks.h"
#include "mixtrain/train/tensorboard_hook.h"
#include "train/numerics_sites.h"

namespace mixtrain {

void add_observer_hooks(TrainingRun& run, const RunOptions& opt) {
  if (opt.profile) run.add_hook(std::make_unique<ProfileHook>(opt.profile_warmup));
  if (!opt.inject_nonfinite.empty())
    run.add_hook(
        std::make_unique<FaultInjectionHook>(opt.inject_nonfinite, opt.inject_nonfinite_rank.value_or(-1)));
  if (opt.overflow_forensics) run.add_hook(std::make_unique<OverflowForensicsHook>());
  std::unique_ptr<TensorBoardHook> tb;
  if (!opt.tensorboard_dir.empty())
    tb = std::make_unique<TensorBoardHook>(opt.tensorboard_dir, !opt.checkpoint.resume.empty());
  if (!opt.numerics.path.empty()) {
    NumericsHook::SampleFn to_tensorboard;  // each sampled site's amax as a scalar of the step's event
    if (tb)
      to_tensorboard = [t = tb.get(), &run](int64_t, const std::vector<SiteStats>& sites) {
        add_amax_scalars(*t, sites);
        if (const Fp8State* f = run.fp8()) add_fp8_scalars(*t, f->sites());
      };
    run.add_hook(std::make_unique<NumericsHook>(opt.numerics, std::move(to_tensorboard)));
  }
  run.add_hook(std::make_unique<StepLogHook>(opt.log_jsonl));
  if (tb) run.add_hook(std::move(tb));
  run.add_hook(std::make_unique<ProgressHook>(opt.log_every, opt.quiet));
}

KeepFp32Scope::KeepFp32Scope(const std::vector<std::string>& patterns) : saved_(autocast_keep_fp32()) {
  set_autocast_keep_fp32(patterns);
}

KeepFp32Scope::~KeepFp32Scope() { set_autocast_keep_fp32(saved_); }

}  // namespace mixtrain
