// `mixtrain report INPUT... -o report.html`: one self-contained HTML page (report/report.h) of
// comparisons (`compare --json`), step logs (`--log-jsonl`) and TensorBoard directories.
#include <cstdio>

#include "commands.h"
#include "report/report.h"

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
  commands.push_back({[sub] { return sub->parsed(); },
                      [&g, inputs, out, title] {
                        apply_global_options(g);
                        nlohmann::ordered_json r = report_from_inputs(*inputs);
                        if (!title->empty()) r["title"] = *title;
                        write_file_atomic(*out, render_report_html(r));
                        std::printf("report: %s (%zu runs)\n", out->c_str(), r["runs"].size());
                        return 0;
                      }});
}

}  // namespace mixtrain::cli
