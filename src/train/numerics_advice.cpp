// Precision advice from the probes of a few fp32 steps (train/numerics_advice.h).
#include "mixtrain/train/numerics_advice.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/train/trainer.h"
#include "train/fp8_advice_hook.h"
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

// The fp8 advice from the side quantizations of every candidate site (train/fp8_advice.h).
// `in_run`: the sites the configured run puts in fp8 (not kept by the first/last rule,
// fp8_keep or keep_fp32).
struct Fp8Choice {
  Fp8Recipe recipe;
  bool hybrid;
};
std::string choice_name(Fp8Choice c) {
  return std::string(fp8_recipe_name(c.recipe)) + " (" + (c.hybrid ? "hybrid" : "e4m3") + ")";
}
std::string flags_of(Fp8Choice c) {
  std::string f = std::string("fp8_recipe ") + fp8_recipe_name(c.recipe);
  if (c.hybrid != (fp8_default_format(c.recipe) == Fp8Format::hybrid))
    f += std::string(" fp8_format ") + (c.hybrid ? "hybrid" : "e4m3");
  return f;
}

ModeAdvice fp8_advice(const std::vector<Fp8SiteAdvice>& sites, const std::vector<bool>& in_run,
                      const Fp8Config& cfg) {
  ModeAdvice m;
  m.mode = "fp8-mixed";
  const Fp8Choice configured{cfg.recipe, cfg.format_or_default() == Fp8Format::hybrid};
  // The configured choice first, then each recipe in the given format (or its default), then in the
  // other one; Transformer Engine's default first, the rest fastest first on AMX (bench/RESULTS.md).
  std::vector<Fp8Choice> order{configured};
  auto add = [&](Fp8Choice c) {
    for (const Fp8Choice& o : order)
      if (o.recipe == c.recipe && o.hybrid == c.hybrid) return;
    order.push_back(c);
  };
  const Fp8Recipe by_speed[] = {Fp8Recipe::delayed, Fp8Recipe::current, Fp8Recipe::block, Fp8Recipe::rowwise,
                                Fp8Recipe::mxfp8};
  for (bool other : {false, true})
    for (Fp8Recipe r : by_speed) {
      const bool hybrid =
          cfg.format ? *cfg.format == Fp8Format::hybrid : fp8_default_format(r) == Fp8Format::hybrid;
      add({r, other ? !hybrid : hybrid});
    }
  auto failing = [&](Fp8Choice c, bool run_sites_only) {
    std::vector<size_t> v;
    for (size_t i = 0; i < sites.size(); ++i)
      if ((!run_sites_only || in_run[i]) && !sites[i].over_bound(c.recipe, c.hybrid).empty()) v.push_back(i);
    return v;
  };
  auto measured = [&](Fp8Choice c) {
    for (const Fp8SiteAdvice& s : sites)
      if (s.at(c.recipe, Fp8Slot::input).count > 0) return true;
    return false;
  };
  const std::string bounds = "bounds (relative error " + num(kFp8ErrorBoundE4m3) + " in E4M3, " +
                             num(kFp8ErrorBoundE5m2) + " in E5M2; " + pct(kFp8UnderflowBound) + " underflow)";
  // One line per recipe.
  size_t run_sites = 0;
  for (bool b : in_run) run_sites += b;
  std::array<bool, kFp8Recipes> said{};
  for (const Fp8Choice& c : order) {  // each recipe once, in the format it comes first in
    if (said[size_t(c.recipe)]) continue;
    said[size_t(c.recipe)] = true;
    if (!measured(c)) {
      m.lines.push_back(choice_name(c) + ": not measured (delayed scaling is judged from the second step)");
      continue;
    }
    const std::vector<size_t> bad = failing(c, false);
    std::string line = choice_name(c) + ": ";
    if (bad.empty()) {
      line += "within the " + bounds + " at all " + std::to_string(sites.size()) + " linear layers (largest:";
      const Fp8Slot slots[] = {Fp8Slot::input, Fp8Slot::weight,
                               c.hybrid ? Fp8Slot::grad_e5m2 : Fp8Slot::grad_e4m3};
      const char* names[] = {"input", "weight", "grad_output"};
      for (int j = 0; j < 3; ++j) {
        double err = 0, under = 0;
        for (const Fp8SiteAdvice& st : sites) {
          const Fp8ErrorStats& e = st.at(c.recipe, slots[j]);
          err = std::max(err, e.relative_error());
          if (e.count > 0)
            under = std::max(under, static_cast<double>(e.underflow) / static_cast<double>(e.count));
        }
        line +=
            std::string(j ? "," : "") + " " + names[j] + " " + num(err) + " (" + pct(under) + " underflow)";
      }
      line += ")";
    } else {
      line += std::to_string(bad.size()) + " of " + std::to_string(sites.size()) +
              " linear layers over the " + bounds + ":";
      for (size_t n = 0; n < bad.size() && n < 4; ++n) {
        const Fp8SiteAdvice& s = sites[bad[n]];
        line += std::string(n ? "," : "") + " " + s.site + " (";
        const std::vector<std::string> roles = s.over_bound(c.recipe, c.hybrid);
        for (size_t j = 0; j < roles.size(); ++j) {
          const Fp8Slot slot = roles[j] == "input"    ? Fp8Slot::input
                               : roles[j] == "weight" ? Fp8Slot::weight
                               : c.hybrid             ? Fp8Slot::grad_e5m2
                                                      : Fp8Slot::grad_e4m3;
          const Fp8ErrorStats& e = s.at(c.recipe, slot);
          const double n_el = e.count > 0 ? static_cast<double>(e.count) : 1.0;
          line += std::string(j ? "; " : "") + roles[j] + " " + num(e.relative_error()) + ", " +
                  pct(static_cast<double>(e.saturated) / n_el) + " saturated, " +
                  pct(static_cast<double>(e.underflow) / n_el) + " underflow";
        }
        line += ")";
      }
      if (bad.size() > 4) line += " and " + std::to_string(bad.size() - 4) + " more";
    }
    m.lines.push_back(line);
  }
  // The verdict on the configured run, and a fix when it fails.
  const std::vector<size_t> bad_now = failing(configured, true);
  if (!measured(configured)) {
    m.lines.push_back("run at least 2 steps to judge " + choice_name(configured));
    return m;
  }
  if (run_sites == 0) {
    m.lines.push_back(
        "the configured run has no linear layer in fp8 (every one is kept: first and last block, "
        "fp8_keep, keep_fp32); fp8_first_last or fewer kept layers put the ones above in fp8");
  } else if (bad_now.empty()) {
    m.lines.push_back("safe: " + choice_name(configured) + " keeps every one of the run's " +
                      std::to_string(run_sites) + " fp8 linear layers within the bounds");
  } else {
    m.safe = false;
    std::optional<Fp8Choice> fix;
    for (const Fp8Choice& c : order)
      if (measured(c) && failing(c, true).empty()) {
        fix = c;
        break;
      }
    std::string line = choice_name(configured) + " puts " + std::to_string(bad_now.size()) +
                       " of the run's " + std::to_string(run_sites) + " fp8 linear layers over the bounds: ";
    if (fix) {
      line += "use " + flags_of(*fix) + " (within the bounds at all of them)";
    } else {
      // No recipe does: the choice with the fewest sites over, those kept in bf16.
      Fp8Choice best = configured;
      size_t fewest = bad_now.size();
      for (const Fp8Choice& c : order)
        if (measured(c) && failing(c, true).size() < fewest) {
          best = c;
          fewest = failing(c, true).size();
        }
      line += "no recipe keeps them all; use " + flags_of(best);
      for (size_t i : failing(best, true)) line += " fp8_keep " + sites[i].site;
    }
    m.lines.push_back(line);
  }
  // The first and last blocks: whether putting them in fp8 too would stay within the bound.
  if (cfg.keep_first_last && run_sites > 0) {
    size_t edge = 0, edge_bad = 0;
    for (size_t i = 0; i < sites.size(); ++i)
      if (sites[i].first_last) {
        ++edge;
        edge_bad += !sites[i].over_bound(configured.recipe, configured.hybrid).empty();
      }
    if (edge > 0 && bad_now.empty())
      m.lines.push_back(edge_bad == 0 ? "the first and last blocks' " + std::to_string(edge) +
                                            " linear layers are within the bounds too (fp8_first_last puts "
                                            "them in fp8)"
                                      : std::to_string(edge_bad) + " of the first and last blocks' " +
                                            std::to_string(edge) +
                                            " linear layers are over the bounds: keep "
                                            "them in bf16 (the default)");
  }
  return m;
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
  auto fp8 = std::make_shared<std::vector<Fp8SiteAdvice>>();
  const auto caller_hooks = opt_in.add_hooks;
  const Fp8Config fp8_cfg = opt_in.fp8;
  opt.add_hooks = [merged, caller_hooks, fp8, fp8_cfg](TrainingRun& run) {
    if (caller_hooks) caller_hooks(run);
    NumericsOptions n;
    n.every = 1;
    n.histograms = true;
    run.add_hook(std::make_unique<NumericsHook>(
        n, [merged](int64_t, const std::vector<SiteStats>& s) { merged->add(s); }));
    run.add_hook(std::make_unique<Fp8AdviceHook>(fp8_cfg, fp8));  // after it: tees its probe
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
  a.fp8 = *fp8;
  if (!a.fp8.empty()) {
    std::vector<bool> in_run;
    for (const Fp8SiteAdvice& s : a.fp8)
      in_run.push_back(!(s.first_last && opt_in.fp8.keep_first_last) &&
                       !keep_fp32_matches(opt_in.fp8.keep, s.site) &&
                       !keep_fp32_matches(opt_in.keep_fp32, s.site));
    a.modes.push_back(fp8_advice(a.fp8, in_run, opt_in.fp8));
  }
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
