// `mixtrain numerics`: a few probe steps of any training configuration (the JSONL of
// train/numerics_hook.h), or with --advise the precision advice of train/numerics_advice.h.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "finetune_options.h"
#include "mixtrain/train/finetune.h"
#include "mixtrain/train/numerics_advice.h"
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
  add_json_option(sub, *json_arg, "The advice (with --advise)");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, advise, json_arg, task, sub] {
         apply_global_options(g);
         const std::string json = json_output(*sub, *json_arg);
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
