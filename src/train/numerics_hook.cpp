// The numerics probes and the overflow forensics as training hooks (train/numerics_hook.h).
#include "mixtrain/train/numerics_hook.h"

#include <cmath>
#include <cstdio>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/train/output_paths.h"
#include "train/checkpointing.h"
#include "train/numerics_sites.h"

namespace mixtrain {

void NumericsOptions::validate(bool need_path) const {
  if (need_path && path.empty()) throw ArgumentError({"numerics.path"}, "numerics.path is empty");
  if (every < 1)
    throw ArgumentError({"numerics.every"}, "numerics.every must be positive, got " + std::to_string(every));
}

NumericsHook::NumericsHook(NumericsOptions options, SampleFn on_sample)
    : options_(std::move(options)),
      on_sample_(std::move(on_sample)),
      table_(std::make_unique<SiteTable>()),
      probe_(std::make_unique<SiteProbe>(*table_, options_.histograms)) {
  options_.validate(/*need_path=*/!on_sample_);
}

NumericsHook::~NumericsHook() {
  if (autograd::probe_hook() == probe_.get()) autograd::set_probe_hook(nullptr);
}

void NumericsHook::on_run_start(TrainingRun& run) {
  // A resumed run cuts the log back to the checkpoint's step (the records of later steps are the
  // old run's, which this one writes again) and appends, as the step log does.
  if (options_.path.empty()) return;
  const int64_t start = run.start_step();
  if (start > 0 && options_.path != "-") trim_numerics_log(options_.path, start);
  out_ = std::make_unique<OutputStream>(options_.path, "numerics log", /*append=*/start > 0);
}

void NumericsHook::on_step_begin(TrainingRun& run, int64_t step) {
  active_ = sampled(step);
  if (!active_) return;
  table_->clear();
  if (Fp8State* f = run.fp8())  // the fp8 casts of this step report how well they kept their tensors
    for (const auto& s : f->sites()) {
      s->collect = true;
      s->stats = {};
    }
  const ParameterStore& params = run.model().params();
  for (size_t i = 0; i < params.size(); ++i)
    table_->add(&params.infos()[i].name, "param", ProbeKind::weight, params.param(i));
  before_ = params.flat_params().to_floats();  // for the update, after the optimizer step
  autograd::set_probe_hook(probe_.get());
}

void NumericsHook::after_backward(TrainingRun& run, int64_t) {
  if (!active_) return;
  autograd::set_probe_hook(nullptr);
  const ParameterStore& params = run.model().params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params.grad(i);
    SiteStats& s = table_->add(&params.infos()[i].name, "param", ProbeKind::weight_grad, g);
    if (!options_.histograms) continue;
    const std::vector<float> v = g.to_floats();
    add_log2_histogram(v.data(), static_cast<int64_t>(v.size()), s.hist);
    s.has_hist = true;
  }
}

void NumericsHook::after_update(TrainingRun& run, const StepRecord& r) {
  if (!active_) return;
  active_ = false;
  autograd::set_probe_hook(nullptr);  // a non-finite loss skips after_backward
  const ParameterStore& params = run.model().params();
  if (!r.skipped) {
    const std::vector<float> after = params.flat_params().to_floats();
    const DType storage = params.flat_params().dtype();
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamInfo& p = params.infos()[i];
      const size_t at = static_cast<size_t>(p.offset);
      const UpdateStats u = update_stats(before_.data() + at, after.data() + at, p.numel, storage);
      SiteStats& s = table_->add(&p.name, "param", ProbeKind::update, DType::f32, u.stats);
      s.has_ulp = true;
      s.storage = storage;
      for (int k = 0; k < 3; ++k) s.below_half_ulp[k] += u.below_half_ulp[k];
    }
  }
  std::string lines;
  for (const SiteStats& s : table_->sites())
    lines += site_record_json(r.step, r.loss, r.loss_scale, s) + "\n";
  if (Fp8State* f = run.fp8())
    for (const auto& s : f->sites()) {
      s->collect = false;
      for (int role = 0; role < autograd::kFp8Roles; ++role)
        lines += fp8_record_json(r.step, r.loss, *s, role) + "\n";
    }
  if (out_) out_->write(lines);  // one write per step: a killed run leaves whole steps
  if (on_sample_) on_sample_(r.step, table_->sites());
}

void NumericsHook::on_run_end(TrainingRun&, TrainSummary&) {
  if (out_) out_->close();
}

void OverflowForensicsHook::on_nonfinite(TrainingRun& run, StepRecord& r) {
  ForensicsProbe probe;
  {
    const autograd::ScopedProbe scoped(&probe);
    run.replay_step();
  }
  const OverflowSite& f = probe.first();
  char b[160];
  if (f.found) {
    r.overflow_site = f.site + ":" + f.op + (f.backward ? " (backward)" : "");
    std::snprintf(b, sizeof b, " (%s %s, %lld elements), input amax %.4g, loss scale %g", f.op.c_str(),
                  f.backward ? "backward" : "forward", static_cast<long long>(f.nonfinite),
                  static_cast<double>(f.input_amax), r.loss_scale);
    r.overflow_detail = "first non-finite value at " + f.site + b;
  } else {
    std::snprintf(b, sizeof b, "; loss scale %g", r.loss_scale);
    r.overflow_detail = std::string("a re-run of the step stayed finite (the non-finite ") +
                        (r.loss_finite ? "gradient" : "loss") +
                        " came from outside the ops, e.g. an injected fault)" + b;
  }
}

}  // namespace mixtrain
