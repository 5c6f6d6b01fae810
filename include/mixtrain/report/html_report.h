// The HTML report of runs and comparisons (`mixtrain report`, `compare --report`), through JSON
// text: the inputs become one report model (a JSON object; its fields in src/report/report.h),
// which render_report_html_text turns into one self-contained HTML page (the data, the script and
// Chart.js inline).
#pragma once
#include <string>
#include <vector>

#include "mixtrain/report/report_read.h"

namespace mixtrain {

// This machine: CPU model, logical cores, the CPU features mixtrain dispatches on (a JSON object).
std::string machine_json_text();

// The report model of `paths` (compare JSONs, step logs, TensorBoard directories) as JSON text.
// IoError naming the file (and line) for anything unreadable or malformed; ArgumentError when no
// run is found.
std::string report_json_from_inputs(const std::vector<std::string>& paths, ReportRead* read = nullptr);
// One run's "steps" (a JSON array) from step-log lines (JSON objects, as text).
std::string report_steps_json(const std::vector<std::string>& log_lines);
// The HTML page of a report model given as JSON text. IoError for text that is not a JSON object.
std::string render_report_html_text(const std::string& report_json);

}  // namespace mixtrain
