// `mixtrain report INPUT... -o report.html`: one self-contained HTML page (report/report.h) of
// comparisons (`compare --json`), step logs (`--log-jsonl`) and TensorBoard directories.
#include <cstdio>

#include "commands.h"
#include "mixtrain/core/error.h"
#include "mixtrain/report/html_report.h"
#include "mixtrain/train/output_paths.h"

namespace mixtrain::cli {

void register_report(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("report",
                                 "Write one self-contained HTML report (table, curves, memory) of "
                                 "comparisons, step logs, TensorBoard dirs");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto title = std::make_shared<std::string>();
  sub->add_option("inputs", *inputs,
                  "compare --json FILE, --log-jsonl FILE or --tensorboard DIR (any number)")
      ->required();
  sub->add_option("-o,--output", *out, "The HTML file to write")->required();
  sub->add_option("--title", *title, "The page's title (default: mixtrain report)");
  auto strict = std::make_shared<bool>(false);
  sub->add_flag("--strict", *strict,
                "Refuse inputs read only in part (a corrupt TensorBoard record, a missing step log): exit 2");
  commands.push_back({[sub] { return sub->parsed(); },
                      [&g, inputs, out, title, strict] {
                        apply_global_options(g);
                        check_output_path(*out, "--output");
                        ReportRead read;
                        nlohmann::ordered_json r = json_of(report_json_from_inputs(*inputs, &read));
                        if (*strict && !read.warnings.empty())
                          throw IoError("report --strict: " + read.warnings.front() +
                                        (read.warnings.size() > 1
                                             ? " (and " + std::to_string(read.warnings.size() - 1) + " more)"
                                             : "") +
                                        ": no report written");
                        for (const std::string& w : read.warnings)
                          std::fprintf(stderr, "mixtrain: warning: %s\n", one_line(w).c_str());
                        // The output is none of the files read (a compare JSON, the step logs it
                        // names, event files), by device and inode: checked before it is written.
                        RunPaths paths;
                        for (const std::string& f : read.files) paths.inputs.push_back({"report input", f});
                        paths.outputs.push_back({"--output", *out});
                        check_run_paths(paths);
                        if (!title->empty()) r["title"] = *title;
                        write_file_atomic(*out, render_report_html_text(r.dump()));
                        std::printf("report: %s (%zu runs)\n", out->c_str(), r["runs"].size());
                        return 0;
                      }});
}

}  // namespace mixtrain::cli
