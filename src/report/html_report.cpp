// The report through JSON text (mixtrain/report/html_report.h): the library's report model
// (report/report.h), dumped and parsed at the boundary.
#include "mixtrain/report/html_report.h"

#include "core/json_input.h"
#include "mixtrain/core/error.h"
#include "report/report.h"

namespace mixtrain {

std::string machine_json_text() { return machine_json().dump(); }

std::string report_json_from_inputs(const std::vector<std::string>& paths, ReportRead* read) {
  return report_from_inputs(paths, read).dump();
}

std::string report_steps_json(const std::vector<std::string>& log_lines) {
  std::vector<nlohmann::ordered_json> lines;
  lines.reserve(log_lines.size());
  for (const std::string& l : log_lines) lines.push_back(parse_untrusted_ordered_json(l, "a step-log line"));
  return report_steps_from_log_lines(lines).dump();
}

std::string render_report_html_text(const std::string& report_json) {
  const nlohmann::ordered_json j = parse_untrusted_ordered_json(report_json, "the report model");
  if (!j.is_object()) throw IoError("the report model is not a JSON object");
  return render_report_html(j);
}

}  // namespace mixtrain
