// The report model from files: comparisons, step logs, TensorBoard directories (report/report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/file_io.h"
#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/core/error.h"
#include "report/report.h"
#include "train/event_file.h"

namespace mixtrain {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
constexpr uint64_t kMaxInputBytes = uint64_t{1} << 30;

std::string read_text(const std::string& path, ReportRead& read) {
  read.files.push_back(path);
  const std::vector<uint8_t> b = read_file_bounded(path, kMaxInputBytes, "report input");
  return std::string(b.begin(), b.end());
}

// The fields of a step-log line the report draws.
json step_of(const json& line) {
  json s;
  for (const char* k :
       {"step", "loss", "val_loss", "lr", "loss_scale", "skipped", "grad_norm", "tokens_per_s"})
    if (line.contains(k)) s[k] = line[k];
  return s;
}

// A step log: one JSON object with an integer "step" per line. Read as every untrusted input is
// (a regular file of at most kMaxInputBytes: not a FIFO that never ends or /dev/zero; each line
// at most 64 levels deep, no duplicate keys), also when a compare JSON names it.
std::vector<json> read_step_log(const std::string& path, ReportRead& read) {
  read.files.push_back(path);
  const std::vector<uint8_t> bytes = read_file_bounded(path, kMaxInputBytes, "step log");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<json> lines;
  size_t at = 0;
  for (int64_t n = 1; at < text.size(); ++n) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = "step log " + path + " line " + std::to_string(n);
    json j = parse_untrusted_ordered_json(line, where);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
      throw IoError(where + ": not a step-log JSON object");
    lines.push_back(std::move(j));
  }
  return lines;
}

json summary_of_log(const std::vector<json>& lines) {
  json s;
  if (lines.empty()) return s;
  s["steps"] = lines.back()["step"];
  s["final_train_loss"] = lines.back().value("loss", json());
  json val;
  int64_t skipped = 0;
  bool diverged = false;
  double tok = 0;
  for (const json& l : lines) {
    if (l.contains("val_loss")) val = l["val_loss"];
    if (l.value("skipped", false)) ++skipped;
    if (l.value("diverged", false)) diverged = true;
    if (l.contains("tokens_per_s") && l["tokens_per_s"].is_number()) tok += l["tokens_per_s"].get<double>();
  }
  s["val_loss"] = val;
  s["skipped_steps"] = skipped;
  s["diverged"] = diverged;
  s["tokens_per_s"] = tok / static_cast<double>(lines.size());
  if (lines.back().contains("elapsed_s")) s["elapsed_s"] = lines.back()["elapsed_s"];
  return s;
}

json run_from_log(const std::string& label, const std::vector<json>& lines) {
  json run;
  run["label"] = label;
  run["summary"] = summary_of_log(lines);
  run["steps"] = report_steps_from_log_lines(lines);
  return run;
}

// One TensorBoard run directory, as step-log lines (the tags mapped back to the log's fields).
// fp8_scales: the delayed recipe's scales (tags fp8_scale/<role>/<site>) as {"<role>/<site>":
// [[step, scale], ...]}.
std::vector<json> log_lines_from_events(const std::string& dir, json& memory_mib, json& fp8_scales,
                                        ReportRead& read) {
  static const std::map<std::string, std::string> kField = {{"train/loss", "loss"},
                                                            {"val/loss", "val_loss"},
                                                            {"train/lr", "lr"},
                                                            {"train/grad_norm", "grad_norm"},
                                                            {"amp/loss_scale", "loss_scale"},
                                                            {"amp/skipped", "skipped"},
                                                            {"train/tokens_per_s", "tokens_per_s"}};
  std::vector<json> lines;
  for (const std::string& f : list_event_files(dir)) read.files.push_back(f);
  for (const ScalarEvent& e : read_scalar_events(dir, &read.warnings)) {
    json l;
    l["step"] = e.step;
    for (const auto& [tag, v] : e.values) {
      if (const auto it = kField.find(tag); it != kField.end()) {
        if (it->second == "skipped")
          l["skipped"] = v != 0;
        else
          l[it->second] = std::isfinite(v) ? json(v) : json();
      } else if (tag.rfind("memory/", 0) == 0 && tag != "memory/total_mib" && tag.size() > 11) {
        memory_mib[tag.substr(7, tag.size() - 11)] = v;  // memory/<category>_mib
      } else if (tag.rfind("fp8_scale/", 0) == 0 && tag.size() > 10) {
        fp8_scales[tag.substr(10)].push_back(json::array({e.step, std::isfinite(v) ? json(v) : json()}));
      }
    }
    lines.push_back(std::move(l));
  }
  return lines;
}

json run_from_events(const std::string& label, const std::string& dir, ReportRead& read) {
  json memory = json::object(), fp8_scales = json::object();
  const std::vector<json> lines = log_lines_from_events(dir, memory, fp8_scales, read);
  json run = run_from_log(label, lines);
  if (!fp8_scales.empty()) run["fp8_scales"] = fp8_scales;
  json by_cat = json::object();
  double total = 0;
  for (auto& [k, v] : memory.items()) {
    by_cat[k] = static_cast<int64_t>(v.get<double>() * (1 << 20));
    total += v.get<double>();
  }
  if (!by_cat.empty()) run["summary"]["peak_bytes_by_category"] = by_cat;
  (void)total;
  return run;
}

void add_compare(json& report, const std::string& path, const json& cmp, ReportRead& read) {
  if (!cmp["runs"].is_array()) throw IoError("comparison " + path + ": \"runs\" is not an array");
  if (cmp.contains("config") && report["config"].is_null()) report["config"] = cmp["config"];
  if (cmp.contains("machine") && report["machine"].is_null()) report["machine"] = cmp["machine"];
  for (const json& row : cmp["runs"]) {
    if (!row.is_object() || !row.contains("precision") || !row["precision"].is_string())
      throw IoError("comparison " + path + ": a run without a \"precision\" string");
    std::string label = row["precision"].get<std::string>();
    if (row.contains("update_rounding") && row["update_rounding"].is_string())
      label.append(":").append(row["update_rounding"].get<std::string>());
    json run;
    run["label"] = label;
    run["summary"] = row;
    run["steps"] = json::array();
    if (row.contains("log_jsonl") && row["log_jsonl"].is_string()) {
      std::string log = row["log_jsonl"].get<std::string>();
      if (!fs::exists(log) && fs::path(log).is_relative()) {
        const fs::path beside = fs::path(path).parent_path() / log;
        if (fs::exists(beside)) log = beside.string();
      }
      if (fs::exists(log))
        run["steps"] = report_steps_from_log_lines(read_step_log(log, read));
      else
        read.warnings.push_back("report: no curves for " + printable(label) + ": its step log " +
                                printable(log, 200) + " is missing");
    }
    report["runs"].push_back(run);
  }
}

}  // namespace

json machine_json() {
  json m;
  std::string model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  m["cpu"] = model;
  m["logical_cores"] = std::thread::hardware_concurrency();
  const CpuFeatures& f = cpu_features();
  std::string feats;
  for (auto [name, on] : {std::pair{"avx2", f.avx2},
                          {"fma", f.fma},
                          {"f16c", f.f16c},
                          {"avx512f", f.avx512f},
                          {"avx512_bf16", f.avx512_bf16},
                          {"avx512_fp16", f.avx512_fp16},
                          {"amx_bf16", f.amx_bf16}})
    if (on) feats += std::string(feats.empty() ? "" : " ") + name;
  m["cpu_features"] = feats.empty() ? "none of avx2, avx512, amx" : feats;
  m["mixtrain"] = MIXTRAIN_VERSION;
  return m;
}

json report_steps_from_log_lines(const std::vector<json>& lines) {
  json steps = json::array();
  for (const json& l : lines) steps.push_back(step_of(l));
  return steps;
}

json report_from_inputs(const std::vector<std::string>& paths, ReportRead* read_out) {
  ReportRead local;
  ReportRead& read = read_out != nullptr ? *read_out : local;
  json report;
  report["title"] = "mixtrain report";
  report["sources"] = paths;
  report["config"] = nullptr;
  report["machine"] = nullptr;
  report["runs"] = json::array();
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      if (!list_event_files(path).empty()) {
        report["runs"].push_back(
            run_from_events(fs::path(path).lexically_normal().filename().string(), path, read));
        continue;
      }
      std::vector<std::string> subdirs;
      for (const auto& entry : fs::directory_iterator(path, ec))
        if (entry.is_directory() && !list_event_files(entry.path().string()).empty())
          subdirs.push_back(entry.path().string());
      if (subdirs.empty())
        throw IoError("report input " + path + ": a directory without TensorBoard event files");
      std::sort(subdirs.begin(), subdirs.end());
      for (const std::string& d : subdirs)
        report["runs"].push_back(run_from_events(fs::path(d).filename().string(), d, read));
      continue;
    }
    const std::string text = read_text(path, read);
    // A compare JSON (one object with "runs"), else a step log (one object a line). Both through
    // the bounded parser (depth, duplicate keys); json::accept only checks the syntax, building
    // nothing (a deep tree would overflow the stack when freed).
    if (json::accept(text)) {
      const json whole = parse_untrusted_ordered_json(text, "report input " + path);
      if (whole.is_object() && whole.contains("runs")) {
        add_compare(report, path, whole, read);
        continue;
      }
    }
    std::vector<json> lines = read_step_log(path, read);
    if (lines.empty()) throw IoError("report input " + path + ": no step in it");
    report["runs"].push_back(run_from_log(fs::path(path).stem().string(), lines));
  }
  if (report["runs"].empty()) throw ArgumentError("report: no run in the inputs");
  // Labels name the runs in the table and the legends: make them unique.
  std::map<std::string, int> seen;
  for (json& run : report["runs"]) {
    const std::string label = run["label"].get<std::string>();
    if (const int n = ++seen[label]; n > 1) run["label"] = label + " #" + std::to_string(n);
  }
  if (report["machine"].is_null()) report["machine"] = json::object();
  return report;
}

}  // namespace mixtrain
