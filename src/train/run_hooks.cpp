// The hooks of `mixtrain train` (train/run_hooks.h).
#include "mixtrain/train/run_hooks.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/train/output_paths.h"
#include "train/checkpointing.h"
#include "train/summary_json.h"

namespace mixtrain {
namespace {
std::string number_or_null(double v) { return std::isfinite(v) ? std::to_string(v) : "null"; }
}  // namespace

StepLogHook::StepLogHook(std::string path) : path_(std::move(path)) {}
StepLogHook::~StepLogHook() = default;

void StepLogHook::on_run_start(TrainingRun& run) {
  if (path_.empty()) return;
  const int64_t start = run.start_step();
  if (start > 0 && path_ != "-") trim_step_log(path_, start);
  f_ = std::make_unique<OutputStream>(path_, "step log", /*append=*/start > 0);
}

void StepLogHook::on_run_end(TrainingRun&, TrainSummary&) {
  if (f_) f_->close();
}

void StepLogHook::on_step_end(TrainingRun& run, const StepRecord& r) {
  if (!f_) return;
  nlohmann::ordered_json j = step_record_json(r);
  j["overflows"] = run.summary().overflows;
  if (!r.overflow_site.empty()) j["overflow_site"] = r.overflow_site;
  if (!r.scale_event.empty()) j["scale_event"] = r.scale_event;
  if (r.diverged) {
    j["error"] = r.stop_reason.empty() ? "non-finite loss" : r.stop_reason;
    j["diverged"] = true;
  }
  add_evaluation_json(j, r);
  f_->write(j.dump() + "\n");  // one write per line: a killed run leaves whole lines
}

void InterruptHook::on_step_end(TrainingRun& run, const StepRecord&) {
  const int sig = *signal_;
  if (sig == 0 || run.summary().interrupted) return;
  run.summary().interrupted = true;
  run.summary().stop_signal = sig;
}

bool InterruptHook::should_stop(TrainingRun& run, const StepRecord&) { return run.summary().interrupted; }

ProgressHook::ProgressHook(int64_t every, bool quiet) : every_(every), quiet_(quiet), tty_(isatty(1)) {}

void ProgressHook::on_run_start(TrainingRun&) {
  step_seconds_ = 0;
  steps_timed_ = 0;
}

namespace {
// 75 s -> "1:15", 4000 s -> "1:06:40".
std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = static_cast<long long>(seconds + 0.5);
  char b[32];
  if (s >= 3600)
    std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(b, sizeof b, "%lld:%02lld", s / 60, s % 60);
  return b;
}
}  // namespace

void ProgressHook::line(const std::string& text) const {
  if (quiet_) return;
  if (tty_) std::printf("\n");
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void ProgressHook::on_step_end(TrainingRun& run, const StepRecord& r) {
  if (quiet_ || r.diverged) return;
  const int64_t s = r.step, total = run.config().steps;
  step_seconds_ += r.seconds;
  ++steps_timed_;
  const std::string eta =
      clock_text(step_seconds_ / static_cast<double>(steps_timed_) * static_cast<double>(total - s));
  const std::string elapsed = clock_text(r.elapsed_s);
  if (r.evaluated && s != total)
    line("step " + std::to_string(s) + " val_loss " + number_or_null(r.val_loss));
  if (tty_) {
    const int width = 30;
    const int filled = static_cast<int>(width * s / total);
    std::printf("\r[%.*s%*s] %lld/%lld loss %.4f  %.0f tok/s  lr %.2e  %s elapsed, %s left ", filled,
                "##############################", width - filled, "", static_cast<long long>(s),
                static_cast<long long>(total), r.loss, r.tokens_per_s, static_cast<double>(r.lr),
                elapsed.c_str(), eta.c_str());
    if (s == total) std::printf("\n");
    std::fflush(stdout);
  } else if (s == 1 || s % every_ == 0 || s == total) {
    std::printf("step %lld/%lld loss %.4f tok/s %.0f lr %.3e elapsed %s eta %s\n", static_cast<long long>(s),
                static_cast<long long>(total), r.loss, r.tokens_per_s, static_cast<double>(r.lr),
                elapsed.c_str(), eta.c_str());
    std::fflush(stdout);
  }
  if (r.skipped)
    line("step " + std::to_string(s) + ": non-finite " + (r.loss_finite ? "gradients" : "loss") +
         ", step skipped (loss scale " + std::to_string(r.loss_scale) + ")" +
         (r.overflow_detail.empty() ? "" : ": " + r.overflow_detail));
  if (!r.scale_event.empty()) line("loss scale: " + r.scale_event);
}

void FaultInjectionHook::after_backward(TrainingRun& run, int64_t step) {
  const auto it = std::find(steps_.begin(), steps_.end(), step);
  if (it == steps_.end() || (rank_ >= 0 && run.rank() != rank_)) return;
  const double bad = (it - steps_.begin()) % 2 == 0 ? INFINITY : NAN;
  Tensor grads = run.model().params().flat_grads();
  if (grads.is_meta() || run.optimizer().shard().size() == 0) return;  // nothing to poison
  // The first element this rank's optimizer updates (under ZeRO its part's first: the rest of
  // its buffer holds no summed gradient and is never read).
  store_from_f64(grads.raw_data(), grads.dtype(), run.optimizer().shard().begin, bad);
}

void ProfileHook::on_step_begin(TrainingRun& run, int64_t step) {
  if (!profiled(run, step)) return;
  if (run.summary().profiled_steps == 0) {
    Profiler::reset();
    clear_profiled_gemm_problems();
    allocations_before_ = cpu_allocator_stats().system_allocations;
  }
  Profiler::set_enabled(true);
}

void ProfileHook::after_update(TrainingRun& run, const StepRecord& r) {
  if (!profiled(run, r.step)) return;
  Profiler::set_enabled(false);
  TrainSummary& sum = run.summary();
  ++sum.profiled_steps;
  sum.profiled_seconds += r.seconds;
  sum.profiled_tokens += r.tokens;
  sum.breakdown = Profiler::seconds();
  sum.profiled_bytes = Profiler::bytes();
  sum.profiled_system_allocations = cpu_allocator_stats().system_allocations - allocations_before_;
}

}  // namespace mixtrain
