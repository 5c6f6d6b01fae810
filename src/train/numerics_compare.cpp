// Two numerics logs compared (mixtrain/train/numerics_compare.h).
#include "mixtrain/train/numerics_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string_view>

#include "core/json_input.h"
#include "mixtrain/core/error.h"
#include "mixtrain/train/fp8_advice.h"

namespace mixtrain {
namespace {

struct SiteAmax {
  std::string site, op, kind;
  double amax;
};
struct Fp8Cast {
  std::string site, role, format, recipe;
  double rel_error, underflow, saturated;
};
struct StepRecords {
  double loss = NAN;
  bool has_loss = false;
  std::vector<SiteAmax> sites;  // forward outputs, activation and weight gradients, in file order
  std::vector<Fp8Cast> fp8;
};
using Log = std::map<int64_t, StepRecords>;

// A number field (null: NaN, as nlohmann writes a non-finite double); IoError when absent or not
// a number.
double number(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw IoError(where + ": no \"" + key + "\"");
  if (it->is_null()) return NAN;
  if (!it->is_number())
    throw IoError(where + ": \"" + key + "\" is not a number (" + json_excerpt(*it) + ")");
  return it->get<double>();
}
std::string text(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) throw IoError(where + ": no string \"" + key + "\"");
  return it->get<std::string>();
}

Log read_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("numerics log " + path + ": cannot open it");
  Log log;
  bool any_loss = false;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j;
    if (const std::string problem = parse_untrusted_json_line(line, j); !problem.empty())
      throw IoError(where + ": " + problem);
    if (!j.is_object()) throw IoError(where + ": not a JSON object");
    const auto st = j.find("step");
    if (st == j.end() || !st->is_number_integer() || st->get<int64_t>() < 1)
      throw IoError(where + ": no positive integer \"step\"");
    StepRecords& s = log[st->get<int64_t>()];
    if (j.contains("loss")) {
      s.loss = number(j, "loss", where);
      s.has_loss = any_loss = true;
    }
    const std::string kind = text(j, "kind", where);
    if (kind == "fp8") {
      s.fp8.push_back({text(j, "site", where), text(j, "role", where), text(j, "format", where),
                       text(j, "recipe", where), number(j, "rel_error", where), number(j, "underflow", where),
                       number(j, "saturated", where)});
    } else if (kind == "forward" || kind == "grad" || kind == "weight_grad") {
      s.sites.push_back({text(j, "site", where), text(j, "op", where), kind, number(j, "amax", where)});
    }
  }
  if (in.bad()) throw IoError("numerics log " + path + ": read error");
  if (log.empty()) throw IoError("numerics log " + path + ": no records");
  if (!any_loss)
    throw IoError("numerics log " + path +
                  ": no step records a \"loss\" (written by an older mixtrain: run it again)");
  return log;
}

// How far apart two values are, relative to the larger (0 when both are 0; inf when one is not
// finite and the other is; 0 when neither is).
double apart(double a, double b) {
  const bool fa = std::isfinite(a), fb = std::isfinite(b);
  if (fa != fb) return std::numeric_limits<double>::infinity();
  if (!fa) return 0;
  const double m = std::max(std::fabs(a), std::fabs(b));
  return m > 0 ? std::fabs(a - b) / m : 0;
}

std::string percent(double v) {
  if (!std::isfinite(v)) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", 100 * v);
  return b;
}
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace

NumericsComparison compare_numerics(const std::string& base_path, const std::string& run_path,
                                    double loss_bound, double site_bound, int64_t window) {
  if (!(loss_bound > 0) || !(site_bound > 0) || window < 1)
    throw ArgumentError("compare_numerics: the bounds and the window must be positive");
  const Log base = read_log(base_path), run = read_log(run_path);
  NumericsComparison c;
  c.base_path = base_path;
  c.run_path = run_path;
  c.loss_bound = loss_bound;
  c.site_bound = site_bound;
  c.loss_window = window;
  std::vector<int64_t> common;
  for (const auto& [step, s] : base)
    if (run.count(step) && s.has_loss && run.at(step).has_loss) common.push_back(step);
  if (common.empty())
    throw IoError("numerics logs " + base_path + " and " + run_path +
                  ": no sampled step with a loss in both");
  c.steps_compared = int64_t(common.size());

  // The loss departure: the means over a trailing window of sampled steps both logged (a single
  // step's loss moves by several percent from batch to batch; both runs see the same batches).
  std::vector<double> wa, wb;
  for (int64_t step : common) {
    const double a = base.at(step).loss, b = run.at(step).loss;
    double rel;
    if (std::isfinite(a) != std::isfinite(b)) {
      rel = std::numeric_limits<double>::infinity();
    } else if (!std::isfinite(a)) {
      continue;  // both steps skipped
    } else {
      wa.push_back(a);
      wb.push_back(b);
      if (int64_t(wa.size()) > window) {
        wa.erase(wa.begin());
        wb.erase(wb.begin());
      }
      double ma = 0, mb = 0;
      for (size_t i = 0; i < wa.size(); ++i) ma += wa[i], mb += wb[i];
      ma /= double(wa.size());
      mb /= double(wb.size());
      rel = ma != 0 ? std::fabs(mb - ma) / std::fabs(ma) : std::fabs(mb);
      if (rel > loss_bound) {
        c.loss_base = ma;
        c.loss_run = mb;
      }
    }
    if (rel > c.worst_relative || c.worst_step == 0) {
      c.worst_relative = rel;
      c.worst_step = step;
    }
    if (rel > loss_bound) {
      c.loss_step = step;
      if (!std::isfinite(rel)) {
        c.loss_base = a;
        c.loss_run = b;
      }
      break;
    }
  }
  const int64_t last = c.loss_step > 0 ? c.loss_step : common.back();

  // The sites' departures, up to the loss's: each site once, at its first step apart.
  std::set<std::string> seen;
  for (int64_t step : common) {
    if (step > last) break;
    const StepRecords& rs = run.at(step);
    std::map<std::string, double> run_amax;
    for (const SiteAmax& s : rs.sites) run_amax.emplace(s.site + '\n' + s.op + '\n' + s.kind, s.amax);
    for (const SiteAmax& s : base.at(step).sites) {
      const std::string key = s.site + '\n' + s.op + '\n' + s.kind;
      const auto it = run_amax.find(key);
      if (it == run_amax.end() || seen.count(key) || !(apart(s.amax, it->second) > site_bound)) continue;
      seen.insert(key);
      c.sites.push_back({s.site, s.op, s.kind, step, s.amax, it->second});
    }
  }

  // The run's fp8 casts over their bounds, up to the loss departure.
  std::map<std::string, size_t> index;
  for (const auto& [step, rs] : run) {
    if (step > last) break;
    for (const Fp8Cast& f : rs.fp8) {
      const double bound = f.format == "f8_e5m2" ? kFp8ErrorBoundE5m2 : kFp8ErrorBoundE4m3;
      if (!(f.rel_error > bound || f.underflow > kFp8UnderflowBound)) continue;
      const std::string key = f.site + '\n' + f.role;
      auto [it, fresh] = index.emplace(key, c.fp8.size());
      if (fresh) c.fp8.push_back({f.site, f.role, f.format, f.recipe, step, 0, 0, 0, 0, bound});
      Fp8CastTrouble& t = c.fp8[it->second];
      ++t.steps_over;
      t.worst_rel_error = std::max(t.worst_rel_error, f.rel_error);
      t.worst_underflow = std::max(t.worst_underflow, f.underflow);
      t.worst_saturated = std::max(t.worst_saturated, f.saturated);
    }
  }
  // Worst first: by how many times over its bound the cast went, error or underflow.
  const auto over = [](const Fp8CastTrouble& t) {
    return std::max(t.worst_rel_error / t.bound, t.worst_underflow / kFp8UnderflowBound);
  };
  std::stable_sort(c.fp8.begin(), c.fp8.end(),
                   [&](const Fp8CastTrouble& a, const Fp8CastTrouble& b) { return over(a) > over(b); });
  return c;
}

std::string NumericsComparison::text() const {
  std::string t = "compared " + std::to_string(steps_compared) + " sampled steps of " + base_path +
                  " (base) and " + run_path + " (run)\n";
  const std::string mean =
      loss_window == 1 ? std::string("step by step")
                       : "the mean loss of the last " + std::to_string(loss_window) + " compared steps";
  if (loss_step > 0 && !std::isfinite(worst_relative))
    t += "loss departs at step " + std::to_string(loss_step) + ": base " + num(loss_base) + ", run " +
         num(loss_run) + " (one is not finite)\n";
  else if (loss_step > 0)
    t += "loss departs at step " + std::to_string(loss_step) + ": " + mean + ", base " + num(loss_base) +
         ", run " + num(loss_run) + " (apart " + percent(worst_relative) + "; bound " + percent(loss_bound) +
         ")\n";
  else
    t += "loss within " + percent(loss_bound) + " of the base's at every compared step (" + mean +
         "; furthest apart: " + percent(worst_relative) + " at step " + std::to_string(worst_step) + ")\n";
  const std::string upto = loss_step > 0 ? " up to step " + std::to_string(loss_step) : "";
  if (sites.empty()) {
    t += "no site's amax parted by more than " + percent(site_bound) + upto + "\n";
  } else {
    const auto line = [&](const SiteDeparture& s) {
      return s.site + " " + s.op + " " + s.kind + " at step " + std::to_string(s.step) + " (amax base " +
             num(s.amax_base) + ", run " + num(s.amax_run) + ")";
    };
    t += "first site apart (amax by more than " + percent(site_bound) + "): " + line(sites[0]) + "\n";
    for (size_t i = 1; i < sites.size() && i < 5; ++i) t += "  then: " + line(sites[i]) + "\n";
    if (sites.size() > 5) t += "  and " + std::to_string(sites.size() - 5) + " more sites\n";
  }
  if (fp8.empty()) {
    t += "fp8 casts of the run: none over their bounds" + upto + "\n";
    return t;
  }
  t += "fp8 casts of the run over their bounds" + upto + " (relative error " + percent(kFp8ErrorBoundE4m3) +
       " E4M3, " + percent(kFp8ErrorBoundE5m2) + " E5M2; underflow " + percent(kFp8UnderflowBound) + "):\n";
  for (size_t i = 0; i < fp8.size() && i < 8; ++i) {
    const Fp8CastTrouble& f = fp8[i];
    t += "  " + f.site + " " + f.role + " " + f.format + " (" + f.recipe + "): relative error up to " +
         num(f.worst_rel_error) + ", underflow up to " + percent(f.worst_underflow) + ", saturated up to " +
         percent(f.worst_saturated) + "; over on " + std::to_string(f.steps_over) +
         " sampled steps from step " + std::to_string(f.first_step) + "\n";
  }
  if (fp8.size() > 8) t += "  and " + std::to_string(fp8.size() - 8) + " more casts\n";
  const Fp8CastTrouble& w = fp8[0];
  t += "try: ";
  if (w.role == "grad_output" && w.format == "f8_e4m3")
    t += "gradients in E5M2 (fp8_format hybrid: E4M3's range is too short for them), or ";
  else if (w.recipe == "delayed" && w.worst_saturated > 0)
    t += "fp8_recipe current (delayed scaling's history did not foresee this amax: it clipped), or ";
  else if ((w.recipe == "delayed" || w.recipe == "current") && w.worst_underflow > kFp8UnderflowBound)
    t += "a finer scale, fp8_recipe rowwise, mxfp8 or block (one scale for the whole tensor left most of it "
         "below fp8's normals), or ";
  t += "keep " + w.site + " in bf16 (fp8_keep '" + w.site +
       "'); `numerics --advise` measures which recipe keeps every site within the bounds\n";
  return t;
}

}  // namespace mixtrain
