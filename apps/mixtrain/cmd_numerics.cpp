// `mixtrain numerics`: a few probe steps of any training configuration (the JSONL of
// train/numerics_hook.h), or with --advise the precision advice of train/numerics_advice.h.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "finetune_options.h"
#include "mixtrain/train/finetune.h"
#include "mixtrain/train/numerics_advice.h"
#include "mixtrain/train/numerics_compare.h"
#include "mixtrain/train/trainer.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

// The advice names library fields; the user runs flags.
std::string in_flags(std::string text) {
  for (const auto& [field, flag] :
       {std::pair{"keep_fp32", "--keep-fp32"}, std::pair{"update_rounding", "--update-rounding"},
        std::pair{"fp8_recipe", "--fp8-recipe"}, std::pair{"fp8_format", "--fp8-format"},
        std::pair{"fp8_keep", "--fp8-keep"}, std::pair{"fp8_first_last", "--fp8-first-last"}})
    for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at))
      text.replace(at, std::string_view(field).size(), flag);
  return text;
}

nlohmann::ordered_json sites_json(const std::vector<OverflowingSite>& v) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const OverflowingSite& s : v) a.push_back({{"site", s.site}, {"op", s.op}, {"amax", s.amax}});
  return a;
}

void print_numerics_comparison(const NumericsComparison& c, const std::string& json_path) {
  if (json_path.empty()) {
    std::printf("%s", in_flags(c.text()).c_str());
    return;
  }
  nlohmann::ordered_json j;
  j["base"] = c.base_path;
  j["run"] = c.run_path;
  j["steps_compared"] = c.steps_compared;
  j["loss_bound"] = c.loss_bound;
  j["site_bound"] = c.site_bound;
  j["loss_window"] = c.loss_window;
  if (c.loss_step > 0)
    j["loss_departure"] = {{"step", c.loss_step}, {"base", c.loss_base}, {"run", c.loss_run}};
  else
    j["loss_departure"] = nullptr;
  j["furthest_apart"] = {{"step", c.worst_step}, {"relative", c.worst_relative}};
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  for (const SiteDeparture& s : c.sites)
    sites.push_back({{"site", s.site},
                     {"op", s.op},
                     {"kind", s.kind},
                     {"step", s.step},
                     {"amax_base", s.amax_base},
                     {"amax_run", s.amax_run}});
  j["sites_apart"] = sites;
  nlohmann::ordered_json fp8 = nlohmann::ordered_json::array();
  for (const Fp8CastTrouble& f : c.fp8)
    fp8.push_back({{"site", f.site},
                   {"role", f.role},
                   {"format", f.format},
                   {"recipe", f.recipe},
                   {"first_step", f.first_step},
                   {"steps_over", f.steps_over},
                   {"rel_error", f.worst_rel_error},
                   {"rel_error_bound", f.bound},
                   {"underflow", f.worst_underflow},
                   {"saturated", f.worst_saturated}});
  j["fp8_over_bounds"] = fp8;
  j["text"] = in_flags(c.text());
  write_file_atomic(json_path, j.dump(2) + "\n");  // "-": stdout
}

}  // namespace

void print_numerics_advice(const NumericsAdvice& a, const std::string& json_path) {
  if (json_path.empty()) {
    std::printf("advice from %lld fp32 steps with probes:\n%s", static_cast<long long>(a.steps),
                in_flags(a.text()).c_str());
    return;
  }
  nlohmann::ordered_json j;
  j["steps"] = a.steps;
  j["fp16_forward_overflow"] = sites_json(a.fp16_forward);
  j["fp16_overflow"] = sites_json(a.fp16_any);
  j["bf16_overflow"] = sites_json(a.bf16_any);
  j["min_loss_scale_log2"] = a.min_activation_scale_log2;
  j["min_weight_grad_scale_log2"] = a.min_loss_scale_log2;
  j["max_loss_scale_log2"] = a.max_loss_scale_log2;
  j["fp16_grads_lost_unscaled"] = a.fp16_grads_lost_unscaled;
  j["bf16_updates_lost"] = a.bf16_updates_lost;
  j["fp16_updates_lost"] = a.fp16_updates_lost;
  // fp8: per candidate linear layer, per recipe, per role (the output gradient in both formats).
  nlohmann::ordered_json fp8 = nlohmann::ordered_json::array();
  for (const Fp8SiteAdvice& s : a.fp8) {
    nlohmann::ordered_json site{{"site", s.site}, {"first_last", s.first_last}};
    for (int r = 0; r < kFp8Recipes; ++r) {
      const Fp8Recipe recipe = static_cast<Fp8Recipe>(r);
      nlohmann::ordered_json roles;
      const char* names[] = {"input", "weight", "grad_output_e4m3", "grad_output_e5m2"};
      for (int k = 0; k < kFp8Slots; ++k) {
        const Fp8ErrorStats& e = s.at(recipe, static_cast<Fp8Slot>(k));
        if (e.count == 0) continue;  // delayed on one step
        const double n = static_cast<double>(e.count);
        roles[names[k]] = {{"rel_error", e.relative_error()},
                           {"saturated", static_cast<double>(e.saturated) / n},
                           {"underflow", static_cast<double>(e.underflow) / n}};
      }
      if (!roles.is_null()) {
        roles["safe_hybrid"] = s.over_bound(recipe, true).empty();
        roles["safe_e4m3"] = s.over_bound(recipe, false).empty();
        site["recipes"][fp8_recipe_name(recipe)] = roles;
      }
    }
    fp8.push_back(site);
  }
  j["fp8_bounds"] = {{"rel_error_e4m3", kFp8ErrorBoundE4m3},
                     {"rel_error_e5m2", kFp8ErrorBoundE5m2},
                     {"underflow", kFp8UnderflowBound}};
  j["fp8_sites"] = fp8;
  for (const ModeAdvice& m : a.modes) {
    nlohmann::ordered_json lines = nlohmann::ordered_json::array();
    for (const std::string& l : m.lines) lines.push_back(in_flags(l));
    j["modes"][m.mode] = {{"safe", m.safe}, {"advice", lines}};
  }
  write_file_atomic(json_path, j.dump(2) + "\n");  // "-": stdout
}

void register_numerics(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("numerics",
                                 "Probe a few steps of a training configuration (--numerics FILE), or "
                                 "--advise which precision it can take");
  auto f = std::make_shared<TrainFlags>();
  auto advise = std::make_shared<bool>(false);
  auto json_arg = std::make_shared<std::string>();
  auto task = std::make_shared<TaskFlags>();
  add_train_flags(sub, *f, /*with_precision=*/true);
  add_task_flags(sub, *task);
  sub->add_flag("--advise", *advise,
                "Run the steps in 32-true with probes and say which precision modes are safe");
  auto compare = std::make_shared<std::vector<std::string>>();
  auto loss_bound = std::make_shared<double>(0.01), site_bound = std::make_shared<double>(0.10);
  sub->add_option("--compare", *compare,
                  "BASE RUN: two --numerics files of one configuration (e.g. bf16-mixed and fp8-mixed, "
                  "same seed): the step where RUN's loss parts from BASE's, the site that parted "
                  "first, and RUN's fp8 casts over their bounds (no training)")
      ->expected(2);
  sub->add_option("--loss-bound", *loss_bound,
                  "--compare: the losses part where they differ by more than this fraction of BASE's")
      ->check(CLI::PositiveNumber)
      ->default_str("0.01");
  sub->add_option("--site-bound", *site_bound,
                  "--compare: a site parts where its amax differs by more than this fraction of the larger")
      ->check(CLI::PositiveNumber)
      ->default_str("0.1");
  auto loss_window = std::make_shared<int64_t>(5);
  sub->add_option("--loss-window", *loss_window,
                  "--compare: the losses compared are the means over this many of the last sampled steps")
      ->check(CLI::PositiveNumber)
      ->default_str("5");
  add_json_option(sub, *json_arg, "The advice (with --advise) or the comparison (with --compare)");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, advise, json_arg, task, sub, compare, loss_bound, site_bound, loss_window] {
         apply_global_options(g);
         const std::string json = json_output(*sub, *json_arg);
         if (!compare->empty()) {
           if (*advise) throw ArgumentError("--compare and --advise: one at a time");
           if (!f->opt.numerics.path.empty())
             throw ArgumentError("--compare reads two --numerics files; it takes no --numerics of its own");
           if (!json.empty() && json != "-") check_output_path(json, "--json");
           print_numerics_comparison(
               compare_numerics((*compare)[0], (*compare)[1], *loss_bound, *site_bound, *loss_window), json);
           return 0;
         }
         if (sub->count("--loss-bound") || sub->count("--site-bound") || sub->count("--loss-window"))
           throw ArgumentError("--loss-bound, --site-bound and --loss-window go with --compare");
         f->finish();
         if (!f->given("--steps")) f->opt.steps = 3;
         if (!f->given("--warmup")) f->opt.warmup = 0;
         f->opt.quiet = true;
         std::optional<FinetuneOptions> fo = task->short_finetune(*f);  // --steps 3
         if (fo) fo->train.quiet = true;
         if (!*advise) {
           if (!json.empty()) throw ArgumentError("--json needs --advise");
           if (f->opt.numerics.path.empty())
             throw ArgumentError("--numerics FILE is needed (where the probes write), or --advise");
           const TrainSummary s = fo ? finetune(*fo).run : train(f->opt);
           std::printf("probed %lld steps (%s) every %lld: %s\n", static_cast<long long>(s.steps),
                       s.precision.c_str(), static_cast<long long>(f->opt.numerics.every),
                       f->opt.numerics.path.c_str());
           return 0;
         }
         if (f->given("--precision"))
           std::fprintf(stderr,
                        "mixtrain: warning: --precision has no effect with --advise (it runs 32-true)\n");
         if (!json.empty() && json != "-") check_output_path(json, "--json");
         add_json_output(fo ? fo->train : f->opt, json);  // and against the trial runs' inputs
         print_numerics_advice(fo ? advise_finetune_numerics(*fo) : advise_numerics(f->opt), json);
         return 0;
       }});
}

}  // namespace mixtrain::cli
