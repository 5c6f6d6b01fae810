// `mixtrain compare`: trains the same model from the same seed on the same batches once per
// precision mode and prints speed, memory and accuracy side by side (the main job).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "mixtrain/kernels/backend.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

std::string with_suffix(const std::string& path, const std::string& tag) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + "." + tag;
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return b;
}

}  // namespace

void register_compare(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("compare", "Train once per precision mode and compare speed, memory and accuracy");
  auto f = std::make_shared<TrainFlags>();
  auto precisions = std::make_shared<std::string>("32-true,16-mixed,bf16-mixed,16-true,bf16-true");
  auto json_path = std::make_shared<std::string>();
  add_train_flags(sub, *f, /*with_precision=*/false);
  sub->add_option("--precisions", *precisions, "Comma-separated precision modes")->capture_default_str();
  sub->add_option("--json", *json_path, "Also write the comparison as JSON to FILE");
  commands.push_back({[sub] { return sub->parsed(); }, [&g, f, precisions, json_path] {
    apply_global_options(g);
    f->finish();
    // Each entry is MODE or MODE:ROUNDING (e.g. bf16-true:kahan), so one comparison can show
    // what each update rounding of a *-true mode costs and buys.
    struct Run {
      PrecisionMode mode;
      UpdateRounding rounding;
      std::string label;
    };
    std::vector<Run> modes;
    std::stringstream ss(*precisions);
    for (std::string item; std::getline(ss, item, ',');) {
      if (item.empty()) continue;
      const auto colon = item.find(':');
      Run r{parse_precision(item.substr(0, colon)), f->opt.update_rounding, item};
      if (colon != std::string::npos) {
        r.rounding = parse_update_rounding(item.substr(colon + 1));
        if (precision_spec(r.mode).param_dtype == DType::f32)
          throw ArgumentError("--precisions: " + item + ": an update rounding applies to 16-true and bf16-true only");
      } else if (precision_spec(r.mode).param_dtype != DType::f32) {
        r.label += ":" + std::string(update_rounding_name(r.rounding));
      }
      modes.push_back(r);
    }
    if (modes.empty()) throw ArgumentError("--precisions lists no precision mode");

    nlohmann::ordered_json out;
    nlohmann::ordered_json config;
    config["model"] = f->opt.model;
    config["data"] = f->opt.data.empty() ? "built-in" : f->opt.data;
    config["steps"] = f->opt.steps;
    config["batch_size"] = f->opt.batch_size;
    config["seq_len"] = f->opt.seq_len;
    config["grad_accum"] = f->opt.grad_accum;
    config["lr"] = f->opt.lr;
    config["seed"] = f->opt.seed;
    config["update_rounding"] = f->update_rounding;
    config["threads"] = num_threads();
    out["config"] = config;
    out["runs"] = nlohmann::ordered_json::array();
    double base_tok_s = 0;
    std::printf("%-18s %10s %8s %10s %12s %10s %10s %8s %9s\n", "precision", "tokens/s", "speedup", "peak MiB",
                "activ. MiB", "train loss", "val loss", "skipped", "diverged");
    for (const Run& run : modes) {
      const PrecisionMode m = run.mode;
      TrainOptions o = f->opt;
      o.precision = m;
      o.update_rounding = run.rounding;
      o.quiet = true;
      std::string tag = run.label;
      std::replace(tag.begin(), tag.end(), ':', '-');
      if (!o.log_jsonl.empty()) o.log_jsonl = with_suffix(o.log_jsonl, tag);
      TrainSummary s;
      try {
        s = train(o);
      } catch (const DivergedError& e) {
        s = e.summary;  // a result, not an error: reported in its row, the comparison goes on
      }
      if (m == PrecisionMode::true32) base_tok_s = s.tokens_per_s;
      nlohmann::ordered_json r = s.to_json();
      nlohmann::ordered_json row;
      row["precision"] = s.precision;
      if (precision_spec(m).param_dtype != DType::f32) row["update_rounding"] = update_rounding_name(run.rounding);
      row["tokens_per_s"] = s.tokens_per_s;
      row["speedup_vs_32_true"] = base_tok_s > 0 ? nlohmann::ordered_json(s.tokens_per_s / base_tok_s) : nullptr;
      row["peak_bytes"] = r["peak_bytes"];
      row["peak_bytes_by_category"] = r["peak_bytes_by_category"];
      row["final_train_loss"] = r["final_train_loss"];
      row["val_loss"] = r["val_loss"];
      row["skipped_steps"] = s.skipped_steps;
      row["diverged"] = s.diverged;
      row["final_loss_scale"] = s.final_loss_scale;
      row["mfu"] = s.mfu;
      out["runs"].push_back(row);
      const auto& by = r["peak_bytes_by_category"];
      const int64_t act = by.contains("activations") ? by["activations"].get<int64_t>() : 0;
      std::printf("%-18s %10.0f %7.2fx %10s %12s %10.4f %10.4f %8lld %9s\n", run.label.c_str(), s.tokens_per_s,
                  base_tok_s > 0 ? s.tokens_per_s / base_tok_s : 0.0, mib(r["peak_bytes"].get<int64_t>()).c_str(),
                  mib(act).c_str(), s.final_train_loss, s.val_loss, static_cast<long long>(s.skipped_steps),
                  s.diverged ? "yes" : "no");
      std::fflush(stdout);
    }
    if (!json_path->empty()) write_file_atomic(*json_path, out.dump(2) + "\n");
    return 0;
  }});
}

}  // namespace mixtrain::cli
