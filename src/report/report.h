// The HTML report of runs and comparisons (`mixtrain report`, `mixtrain compare --report`).
// Inputs become one report model (JSON), which render_report_html turns into one self-contained
// HTML file: the data, the page's script and Chart.js (Debian's libjs-chart.js, compiled into
// the library) inline, nothing fetched when it is opened.
//
// The model:
//   {"title": str, "sources": [path...], "config": {...} | null, "machine": {...} | null,
//    "runs": [{"label": str,
//              "summary": {"tokens_per_s", "peak_bytes", "peak_bytes_by_category": {cat: bytes},
//                          "final_train_loss", "val_loss", "skipped_steps", "diverged",
//                          "elapsed_s", ...} | null,
//              "steps": [{"step", "loss", "val_loss"?, "lr", "loss_scale", "skipped"}, ...],
//              "fp8_scales"?: {"<role>/<site>": [[step, scale], ...]}}]}
//   (fp8_scales: an fp8-mixed delayed-scaling run's TensorBoard directory with --numerics, its
//   sampled steps' scales per fp8 layer and role)
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtrain/report/report_read.h"

namespace mixtrain {

// This machine: CPU model, logical cores, the CPU features mixtrain dispatches on.
nlohmann::ordered_json machine_json();

// The report of `paths`, each one of:
//   - a comparison (`compare --json`): its config, machine and one run per row, each with the
//     curves of its step log when the row names one (`log_jsonl`, as given or beside the JSON);
//   - a step log (`train --log-jsonl`, one JSON object per line): one run named after the file;
//   - a TensorBoard directory (`--tensorboard DIR`): one run if it holds event files, else one
//     per subdirectory that does (a comparison's), named after it.
// IoError naming the file (and line) for anything unreadable or malformed; ArgumentError when
// no run is found. What is read but incomplete goes into `read` (mixtrain/report/report_read.h;
// mixtrain/report/html_report.h has the public, text form of these functions).
nlohmann::ordered_json report_from_inputs(const std::vector<std::string>& paths, ReportRead* read = nullptr);

// One run of a report from a step log already in memory (the StepRecord fields, as step-log
// JSON objects).
nlohmann::ordered_json report_steps_from_log_lines(const std::vector<nlohmann::ordered_json>& lines);

// The HTML page of a report model.
std::string render_report_html(const nlohmann::ordered_json& report);

}  // namespace mixtrain
