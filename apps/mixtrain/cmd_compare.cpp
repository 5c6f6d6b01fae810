// `mixtrain compare`: prints compare_precisions (train/compare.h), one row per precision mode as
// each run finishes, speed, memory and accuracy side by side (the main job), and optionally JSON.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "finetune_options.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/report/html_report.h"
#include "mixtrain/train/compare.h"
#include "mixtrain/train/output_paths.h"
#include "mixtrain/train/results_json.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

std::string mib_cell(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", mib(bytes));
  return b;
}

// The process's resident peak over the run; "-" where not measured, "*" marks the process's whole
// peak (Linux would not restart the mark for the run).
std::string rss_mib(const CompareRun& run) {
  const ProcessMemory& pm = run.summary.process;
  if (pm.peak_rss_bytes < 0) return "-";
  return mib_cell(pm.peak_rss_bytes) + (pm.peak_from_start ? "" : "*");
}

void print_header(const std::string& baseline) {
  std::printf("speed-up relative to %s\n", baseline.c_str());
  std::printf("%-18s %10s %8s %10s %10s %12s %10s %10s %8s %9s\n", "precision", "tokens/s", "speedup",
              "peak MiB", "RSS MiB", "activ. MiB", "train loss", "val loss", "skipped", "diverged");
}

void print_row(const CompareRun& run) {
  const TrainSummary& s = run.summary;
  char speedup[32] = "-";  // none for a diverged run
  if (std::isfinite(run.speedup)) std::snprintf(speedup, sizeof speedup, "%.2fx", run.speedup);
  std::printf("%-18s %10.0f %8s %10s %10s %12s %10.4f %10.4f %8lld %9s\n", run.entry.label.c_str(),
              s.tokens_per_s, speedup, mib_cell(run.memory.peak_total).c_str(), rss_mib(run).c_str(),
              mib_cell(run.memory.peak[static_cast<size_t>(MemCategory::activations)]).c_str(),
              s.final_train_loss, s.val_loss, static_cast<long long>(s.skipped_steps),
              s.diverged ? "yes" : "no");
  std::fflush(stdout);
}

// Keeps every step of a run as a step-log object (the fields the report draws).
class StepCollector final : public TrainingHook {
 public:
  explicit StepCollector(std::vector<std::string>& out) : out_(out) {}
  void on_step_end(TrainingRun&, const StepRecord& r) override {
    out_.push_back(step_record_json_text(r));  // the step log's fields (mixtrain/train/results_json.h)
  }

 private:
  std::vector<std::string>& out_;
};

// The report model of a comparison (report/report.h): its JSON's config, machine and rows, each
// row with the steps collected while it ran.
nlohmann::ordered_json compare_report(const nlohmann::ordered_json& j,
                                      const std::vector<std::vector<std::string>>& steps,
                                      const std::string& json_path) {
  nlohmann::ordered_json r;
  r["title"] = "mixtrain compare";
  r["sources"] = nlohmann::ordered_json::array();
  if (!json_path.empty()) r["sources"].push_back(json_path);
  r["config"] = j["config"];
  r["machine"] = j["machine"];
  r["runs"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < j["runs"].size(); ++i) {
    const nlohmann::ordered_json& row = j["runs"][i];
    nlohmann::ordered_json run;
    std::string label = row["precision"].get<std::string>();
    if (row.contains("update_rounding")) label.append(":").append(row["update_rounding"].get<std::string>());
    if (row.contains("fp8_recipe")) label.append(":").append(row["fp8_recipe"].get<std::string>());
    run["label"] = label;
    run["summary"] = row;
    run["steps"] = i < steps.size() ? json_of(report_steps_json(steps[i])) : nlohmann::ordered_json::array();
    r["runs"].push_back(run);
  }
  return r;
}

// The `runs` of compare --json, one row per run: its precision (and update rounding where the
// weights are 16-bit), then the columns `columns(row, run)` adds (the GPT compare's or the
// fine-tune's).
template <class Columns>
nlohmann::ordered_json runs_json(const CompareResult& result, const Columns& columns) {
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const CompareRun& run : result.runs) {
    nlohmann::ordered_json row;
    row["precision"] = run.summary.precision;
    if (precision_spec(run.entry.mode).param_dtype != DType::f32)
      row["update_rounding"] = update_rounding_name(run.entry.rounding);
    if (run.entry.fp8_recipe) row["fp8_recipe"] = fp8_recipe_name(*run.entry.fp8_recipe);
    columns(row, run);
    runs.push_back(row);
  }
  return runs;
}

// The run's peak memory: in all and by category.
void add_peaks(nlohmann::ordered_json& row, const CompareRun& run) {
  row["peak_bytes"] = run.memory.peak_total;
  row["peak_bytes_by_category"] = json_of(peaks_json_text(run.memory.peak));
  row["at_peak_by_category"] = json_of(peaks_json_text(run.memory.at_peak));
  // The process over the run (tensor/memory.h): resident peak and fixed size beside the tensors.
  const ProcessMemory& pm = run.summary.process;
  row["peak_rss_bytes"] = pm.peak_rss_bytes >= 0 ? nlohmann::ordered_json(pm.peak_rss_bytes) : nullptr;
  row["peak_rss_from_start"] = pm.peak_from_start;
  row["fixed_rss_bytes"] = pm.fixed_bytes >= 0 ? nlohmann::ordered_json(pm.fixed_bytes) : nullptr;
}

// How the run went: steps skipped on non-finite gradients, and whether it diverged.
void add_health(nlohmann::ordered_json& row, const TrainSummary& s) {
  row["skipped_steps"] = s.skipped_steps;
  row["diverged"] = s.diverged;
}

nlohmann::ordered_json to_json(const CompareResult& result, const TrainOptions& base) {
  nlohmann::ordered_json out;
  nlohmann::ordered_json config;
  config["model"] = base.model;
  config["data"] = base.data.empty() ? "built-in" : base.data;
  config["steps"] = base.steps.value_or(0);
  config["batch_size"] = base.batch_size;
  config["seq_len"] = base.seq_len.value_or(0);
  config["grad_accum"] = base.grad_accum;
  config["lr"] = base.lr;
  config["seed"] = base.seed;
  config["update_rounding"] = update_rounding_name(base.update_rounding);
  config["threads"] = result.threads;
  out["config"] = config;
  out["machine"] = json_of(machine_json_text());
  out["speedup_baseline"] = result.baseline;
  if (result.interrupted) out["interrupted_during"] = result.interrupted_label;
  out["runs"] = runs_json(result, [&](nlohmann::ordered_json& row, const CompareRun& run) {
    const TrainSummary& s = run.summary;
    row["tokens_per_s"] = s.tokens_per_s;
    row["speedup"] = finite_or_null(run.speedup);
    add_peaks(row, run);
    row["final_train_loss"] = finite_or_null(s.final_train_loss);
    row["val_loss"] = finite_or_null(s.val_loss);
    add_health(row, s);
    row["final_loss_scale"] = s.final_loss_scale;
    row["mfu"] = s.mfu;
    row["elapsed_s"] = s.elapsed_s;
    if (!base.log_jsonl.empty()) row["log_jsonl"] = compare_log_path(base.log_jsonl, run.entry);
  });
  return out;
}

// The fine-tune's table (the reference experiment's columns): precision, time, peak memory, test
// accuracy, diverged.
void print_classify_header(double majority) {
  std::printf("test accuracy of the majority class: %.2f%%\n", 100 * majority);
  std::printf("%-18s %10s %10s %10s %10s %9s %10s %9s\n", "precision", "time (s)", "peak MiB", "RSS MiB",
              "test acc.", "test loss", "tokens/s", "diverged");
}

void print_classify_row(const CompareRun& run) {
  const TrainSummary& s = run.summary;
  char acc[32];
  if (std::isfinite(s.val_accuracy))
    std::snprintf(acc, sizeof acc, "%.2f%%", 100 * s.val_accuracy);
  else
    std::snprintf(acc, sizeof acc, "NaN");
  std::printf("%-18s %10.1f %10s %10s %10s %9.4f %10.0f %9s\n", run.entry.label.c_str(), s.elapsed_s,
              mib_cell(run.memory.peak_total).c_str(), rss_mib(run).c_str(), acc, s.val_loss, s.tokens_per_s,
              s.diverged ? "yes" : "no");
  std::fflush(stdout);
}

nlohmann::ordered_json classify_json(const CompareResult& result, const FinetuneOptions& base,
                                     double majority) {
  nlohmann::ordered_json out;
  nlohmann::ordered_json config;
  config["task"] = base.task.empty() ? base.train_path : base.task;
  config["model"] = base.model_dir.empty() ? "built-in all-MiniLM-L6-v2" : base.model_dir;
  config["epochs"] = base.epochs;
  config["max_len"] = base.max_len;
  config["batch_size"] = base.train.batch_size;
  config["lr"] = base.train.lr;
  config["seed"] = base.train.seed;
  config["threads"] = result.threads;
  out["config"] = config;
  out["machine"] = json_of(machine_json_text());
  out["majority_baseline"] = majority;
  if (result.interrupted) out["interrupted_during"] = result.interrupted_label;
  out["runs"] = runs_json(result, [](nlohmann::ordered_json& row, const CompareRun& run) {
    const TrainSummary& s = run.summary;
    row["train_seconds"] = s.elapsed_s;
    add_peaks(row, run);
    row["test_accuracy"] = finite_or_null(s.val_accuracy);
    row["test_loss"] = finite_or_null(s.val_loss);
    row["tokens_per_s"] = s.tokens_per_s;
    row["speedup"] = finite_or_null(run.speedup);
    add_health(row, s);
  });
  return out;
}

// compare --task classify|finefoods|fortunes: the fine-tune once per mode.
int run_classify_compare(FinetuneFlags& ff, const std::vector<CompareEntry>& entries,
                         const std::string& json_path) {
  if (!json_path.empty()) check_output_path(json_path, "--json");
  // And against each fine-tune's inputs (--train, --test, the model directory's files).
  add_json_output(ff.opt.train, json_path);
  install_stop_handlers();
  make_interruptible(ff.opt.train);
  ff.opt.train.world = &join_world("compare");         // under mpirun every mode's fine-tune is data parallel
  const bool rank0 = ff.opt.train.world->rank() == 0;  // the only one that reports
  bool header = false;
  double majority = 0;  // known once the first run loaded the data, before its row is printed
  const CompareResult result = compare_finetune(
      ff.opt, entries,
      [&](const CompareRun& run) {
        if (!rank0) return;
        if (!header) print_classify_header(majority);
        header = true;
        print_classify_row(run);
      },
      &majority);
  if (!rank0) return result.interrupted ? 128 + result.stop_signal : 0;
  if (result.interrupted)
    std::fprintf(stderr, "mixtrain: interrupted during %s by %s; %zu finished mode(s) reported\n",
                 result.interrupted_label.c_str(), result.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                 result.runs.size());
  if (!json_path.empty())
    write_file_atomic(json_path, classify_json(result, ff.opt, majority).dump(2) + "\n");
  return result.interrupted ? 128 + result.stop_signal : 0;
}

}  // namespace

void register_compare(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub =
      app.add_subcommand("compare", "Train once per precision mode and compare speed, memory and accuracy");
  auto f = std::make_shared<TrainFlags>();
  auto precisions = std::make_shared<std::string>("32-true,16-mixed,bf16-mixed,16-true,bf16-true");
  auto json_path = std::make_shared<std::string>();
  auto report_path = std::make_shared<std::string>();
  auto task = std::make_shared<TaskFlags>();
  add_train_flags(sub, *f, /*with_precision=*/false);
  add_task_flags(sub, *task);
  add_data_parallel_flags(sub, *f);
  sub->add_option("--precisions", *precisions,
                  "Comma-separated precision modes; MODE:ROUNDING for a *-true mode (bf16-true:kahan), "
                  "fp8-mixed:RECIPE for an fp8 recipe (fp8-mixed:mxfp8)")
      ->capture_default_str();
  add_json_option(sub, *json_path, "Also the comparison");
  sub->add_option("--report", *report_path,
                  "Also write the comparison as a self-contained HTML report to FILE");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, task, precisions, json_path, report_path, sub] {
         apply_global_options(g);
         *json_path = json_output(*sub, *json_path);
         std::vector<CompareEntry> entries;
         try {
           entries = parse_compare_entries(*precisions, parse_update_rounding(f->update_rounding));
         } catch (const ArgumentError& e) {
           throw ArgumentError(std::string("--precisions: ") + e.what());
         }
         std::vector<PrecisionMode> modes;
         for (const CompareEntry& e : entries) modes.push_back(e.mode);
         f->finish(modes);
         if (!task->lm()) {
           if (!report_path->empty())
             throw ArgumentError("--report is for --task lm (the fine-tune prints its table)");
           task->finetune_options(*f);
           return run_classify_compare(task->finetune, entries, *json_path);
         }
         task->refuse_finetune_flags();
         // --json and --report checked with every run's step log before the first run trains (an
         // unwritable or clashing output would otherwise be found after all of them).
         if (!json_path->empty() || !report_path->empty())
           for (const CompareEntry& e : entries) {
             TrainOptions o = f->opt;
             o.log_jsonl = compare_log_path(f->opt.log_jsonl, e);
             o.numerics.path = compare_log_path(f->opt.numerics.path, e);
             RunPaths paths = train_run_paths(o);
             if (!json_path->empty()) paths.outputs.push_back({"--json", *json_path});
             if (!report_path->empty()) paths.outputs.push_back({"--report", *report_path});
             check_run_paths(paths);
           }
         // --report: every run's steps, collected as step-log objects for the curves.
         auto steps = std::make_shared<std::vector<std::vector<std::string>>>();
         if (!report_path->empty())
           f->opt.add_hooks = [steps](TrainingRun& run) {
             steps->emplace_back();
             run.add_hook(std::make_unique<StepCollector>(steps->back()));
           };
         install_stop_handlers();
         make_interruptible(f->opt);
         f->opt.world = &join_world("compare");         // under mpirun every mode's run is data parallel
         const bool rank0 = f->opt.world->rank() == 0;  // the only one that reports
         // The header waits for the first row: compare_precisions checks every path first.
         bool header = false;
         const CompareResult result = compare_precisions(f->opt, entries, [&](const CompareRun& run) {
           if (!rank0) return;
           if (!header) print_header(run.entry.label);
           header = true;
           print_row(run);
         });
         if (!rank0) return result.interrupted ? 128 + result.stop_signal : 0;
         if (result.interrupted)
           std::fprintf(stderr, "mixtrain: interrupted during %s by %s; %zu finished mode(s) reported\n",
                        result.interrupted_label.c_str(), result.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                        result.runs.size());
         const nlohmann::ordered_json j = to_json(result, f->opt);
         if (!json_path->empty()) write_file_atomic(*json_path, j.dump(2) + "\n");
         if (!report_path->empty()) {
           write_file_atomic(*report_path,
                             render_report_html_text(compare_report(j, *steps, *json_path).dump()));
           std::printf("report: %s\n", report_path->c_str());
         }
         return result.interrupted ? 128 + result.stop_signal : 0;
       }});
}

}  // namespace mixtrain::cli
