// Precision advice from the probes of a few fp32 steps (train/numerics_advice.h).
#include "mixtrain/train/numerics_advice.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <tuple>

#include "mixtrain/train/trainer.h"
#include "train/numerics_sites.h"

namespace mixtrain {
namespace {

constexpr double kFp16Max = 65504.0;
constexpr int kFp16MinNormalLog2 = -14;
constexpr double kLostUpdatesWorthFixing = 0.01;  // 1% of updates lost: recommend Kahan / stochastic

bool gemm_family(const std::string& op) {
  return op == "linear" || op == "matmul" || op == "attention" || op == "attention_qkv";
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}
std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * f);
  return b;
}

// The probes' sites merged over the sampled steps.
struct Merged {
  std::map<std::tuple<std::string, std::string, ProbeKind>, SiteStats> sites;
  void add(const std::vector<SiteStats>& step) {
    for (const SiteStats& s : step) {
      auto [it, fresh] = sites.try_emplace({s.site, s.op, s.kind}, s);
      if (!fresh) it->second.merge(s);
    }
  }
};

// The smallest k such that at most 0.1% of the magnitude (sum of |x|) of the values of `h` stays
// below 2^-14 at scale 2^k. Bin b holds [2^(b-127), 2^(b-126)), its values taken as 1.5 * 2^(b-127)
// (bin 0: zeros and fp32 subnormals, taken as 2^-127; `zeros` of them are exact zeros, left out),
// so a value in bin b reaches 2^-14 when b - 127 + k >= -14. Magnitude, not count: a BERT
// fine-tune has a long tail of activation gradients so small that keeping 99.9% of them (by
// count) normal would need 2^42, yet 16-mixed at the dynamic scaler's 2^16 trains to 32-true's
// test accuracy (bench/RESULTS.md): values that small add nothing to the update they feed.
int min_scale_log2(const Log2Histogram& h, int64_t zeros) {
  auto mass = [&](int bin) {
    const double n = static_cast<double>(h[static_cast<size_t>(bin)] - (bin == 0 ? zeros : 0));
    return n * (bin == 0 ? std::ldexp(1.0, -127) : 1.5 * std::ldexp(1.0, bin - 127));
  };
  double total = 0;
  for (int b = 0; b < 255; ++b) total += mass(b);
  if (total <= 0) return 0;
  const double allowed = 0.001 * total;
  double below = 0;
  int bin = 0;
  for (; bin < 255; ++bin) {
    if (below + mass(bin) > allowed) break;
    below += mass(bin);
  }
  return kFp16MinNormalLog2 - (bin - 127);
}

}  // namespace

std::string NumericsAdvice::text() const {
  std::string t;
  for (const ModeAdvice& m : modes)
    for (const std::string& l : m.lines) t += m.mode + ": " + l + "\n";
  return t;
}

namespace {

// The advice of the run that `run` makes from `opt_in` (train() or finetune() of it), which it
// returns the steps of.
NumericsAdvice advise_run(const RunOptions& opt_in, const std::function<int64_t(const RunOptions&)>& run) {
  RunOptions opt = opt_in;
  opt.precision = PrecisionMode::true32;
  opt.log_jsonl.clear();
  opt.tensorboard_dir.clear();
  opt.checkpoint = CheckpointOptions{};
  opt.numerics.path.clear();
  opt.keep_fp32.clear();
  opt.inject_nonfinite.clear();
  opt.measure_gemm_rate = false;
  if (opt.steps) opt.max_bad_steps = *opt.steps;  // a NaN is a finding here, not the end
  auto merged = std::make_shared<Merged>();
  const auto caller_hooks = opt_in.add_hooks;
  opt.add_hooks = [merged, caller_hooks](TrainingRun& run) {
    if (caller_hooks) caller_hooks(run);
    NumericsOptions n;
    n.every = 1;
    n.histograms = true;
    run.add_hook(std::make_unique<NumericsHook>(
        n, [merged](int64_t, const std::vector<SiteStats>& s) { merged->add(s); }));
  };
  NumericsAdvice a;
  try {
    a.steps = run(opt);
  } catch (const DivergedError& e) {
    a.steps = e.step;
  }

  // What was measured.
  Log2Histogram wg{}, ag{};
  int64_t wg_zeros = 0, ag_zeros = 0, wg_numel = 0, wg_lost16 = 0, upd_numel = 0, upd_bf16 = 0, upd_fp16 = 0;
  double grad_amax = 0;
  for (const auto& [key, s] : merged->sites) {
    const NumericStats& st = s.stats;
    const double amax = st.amax;
    if (s.kind == ProbeKind::forward || s.kind == ProbeKind::grad) {
      if (st.in(ProbeFormat::fp16).overflow > 0 && s.kind == ProbeKind::forward) {
        a.fp16_any.push_back({s.site, s.op, st.amax});
        if (gemm_family(s.op)) a.fp16_forward.push_back({s.site, s.op, st.amax});
      }
      if (st.in(ProbeFormat::bf16).overflow > 0) a.bf16_any.push_back({s.site, s.op, st.amax});
      if (s.kind == ProbeKind::grad && s.op != "cross_entropy") {  // (the loss's own gradient is the scale)
        grad_amax = std::max(grad_amax, amax);
        for (size_t b = 0; b < 255; ++b) ag[b] += s.hist[b];
        ag_zeros += st.zeros;
      }
    } else if (s.kind == ProbeKind::weight_grad) {  // fp32 here in 16-mixed: no upper bound from them
      for (size_t b = 0; b < 255; ++b) wg[b] += s.hist[b];
      wg_zeros += st.zeros;
      wg_numel += st.numel;
      wg_lost16 += st.in(ProbeFormat::fp16).flushed + st.in(ProbeFormat::fp16).subnormal;
    } else if (s.kind == ProbeKind::update) {
      upd_numel += st.numel;
      upd_bf16 += s.below_half_ulp[1];
      upd_fp16 += s.below_half_ulp[2];
    }
  }
  a.min_loss_scale_log2 = min_scale_log2(wg, wg_zeros);
  a.min_activation_scale_log2 = min_scale_log2(ag, ag_zeros);
  a.max_loss_scale_log2 = grad_amax > 0 ? static_cast<int>(std::floor(std::log2(kFp16Max / grad_amax))) : 24;
  a.fp16_grads_lost_unscaled =
      wg_numel > 0 ? static_cast<double>(wg_lost16) / static_cast<double>(wg_numel) : 0;
  a.bf16_updates_lost = upd_numel > 0 ? static_cast<double>(upd_bf16) / static_cast<double>(upd_numel) : 0;
  a.fp16_updates_lost = upd_numel > 0 ? static_cast<double>(upd_fp16) / static_cast<double>(upd_numel) : 0;

  auto overflow_lines = [](ModeAdvice& m, const std::vector<OverflowingSite>& sites, const char* what,
                           const char* limit, const char* fix) {
    for (const OverflowingSite& s : sites) {
      m.safe = false;
      m.lines.push_back(std::string(what) + " overflows at " + s.site + " (" + s.op + ", amax " +
                        num(s.amax) + " > " + limit + "): " + fix + " keep_fp32 " + s.site);
    }
  };
  ModeAdvice m16;
  m16.mode = "16-mixed";
  overflow_lines(m16, a.fp16_forward, "fp16 forward", "65504", "use bf16-mixed or keep this site in fp32:");
  // In mixtrain's 16-mixed the activation gradients are fp16 (GEMM-family ops) but weight
  // gradients accumulate straight into the fp32 buffer: the activations' range decides.
  const std::string ka = std::to_string(a.min_activation_scale_log2),
                    kw = std::to_string(a.min_loss_scale_log2), kmax = std::to_string(a.max_loss_scale_log2);
  const std::string weights_too =
      "weight gradients would need 2^" + kw + " where a framework keeps them in fp16";
  if (a.min_activation_scale_log2 > a.max_loss_scale_log2) {
    m16.safe = false;
    m16.lines.push_back("no loss scale fits: 99.9% of the activation gradients' magnitude needs at least 2^" +
                        ka + " to stay out of fp16 subnormals, the largest activation gradient (" +
                        num(grad_amax) + ") overflows fp16 above 2^" + kmax + ": use bf16-mixed (" +
                        weights_too + ")");
  } else {
    m16.lines.push_back(
        "needs a loss scale of at least 2^" + ka +
        " to keep 99.9% of the activation gradients' magnitude out of the fp16 subnormal range (" +
        weights_too + "); above 2^" + kmax + " the largest activation gradient (" + num(grad_amax) +
        ") overflows fp16 (the dynamic scaler starts at 2^16 and grows while no step overflows)");
  }
  ModeAdvice b16m;
  b16m.mode = "bf16-mixed";
  overflow_lines(b16m, a.bf16_any, "bf16", "3.39e38", "keep this site in fp32:");
  if (b16m.safe)
    b16m.lines.push_back("safe: no op output or gradient leaves bf16's range; no loss scale needed");
  ModeAdvice t16;
  t16.mode = "16-true";
  overflow_lines(t16, a.fp16_any, "fp16", "65504", "use bf16-true, or a *-mixed mode with");
  if (a.fp16_grads_lost_unscaled > 0.001) {
    t16.safe = false;
    t16.lines.push_back(pct(a.fp16_grads_lost_unscaled) +
                        " of weight gradients are subnormal or flushed to zero in fp16 without a loss scale: "
                        "use 16-mixed or bf16-true");
  }
  if (a.fp16_updates_lost >= kLostUpdatesWorthFixing) {
    t16.safe = false;
    t16.lines.push_back(pct(a.fp16_updates_lost) +
                        " of updates are below half an ulp of their fp16 weight: use update_rounding kahan, "
                        "stochastic or master");
  }
  if (t16.safe)
    t16.lines.push_back("safe in range and updates (" + pct(a.fp16_updates_lost) +
                        " of updates lost to rounding)");
  ModeAdvice tb16;
  tb16.mode = "bf16-true";
  overflow_lines(tb16, a.bf16_any, "bf16", "3.39e38", "use a *-mixed mode with");
  if (a.bf16_updates_lost >= kLostUpdatesWorthFixing) {
    tb16.safe = false;
    tb16.lines.push_back(pct(a.bf16_updates_lost) +
                         " of updates are below half an ulp of their bf16 weight: use update_rounding kahan, "
                         "stochastic or master");
  } else {
    tb16.lines.push_back("nearest rounding loses " + pct(a.bf16_updates_lost) +
                         " of updates (below half a bf16 ulp)");
  }
  a.modes = {m16, b16m, t16, tb16};
  return a;
}

}  // namespace

NumericsAdvice advise_numerics(const TrainOptions& opt) {
  return advise_run(opt, [run = train_with(opt)](const RunOptions& o) { return run(o).steps; });
}

NumericsAdvice advise_finetune_numerics(const FinetuneOptions& fo) {
  return advise_run(fo.train, [&fo](const RunOptions& o) {
    FinetuneOptions f = fo;
    f.train = o;
    f.save_dir.clear();
    return finetune(f).run.steps;
  });
}

}  // namespace mixtrain
