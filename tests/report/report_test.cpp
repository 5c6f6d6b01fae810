// The report page (report/report.h): hostile labels stay text (escaped in the table, never ending
// the embedded JSON's <script>), Chart.js is inline, and every model field reaches the page.
#include "report/report.h"

#include <gtest/gtest.h>

#include <string>

namespace mixtrain {
namespace {
using json = nlohmann::ordered_json;

json one_run(const std::string& label) {
  json r;
  r["title"] = "t";
  r["sources"] = json::array({"a.json"});
  r["config"] = {{"model", "gpt-nano"}, {"steps", 3}};
  r["machine"] = {{"cpu", "test cpu"}};
  json run;
  run["label"] = label;
  run["summary"] = {{"tokens_per_s", 1234.4},  {"peak_bytes", 3 << 20}, {"peak_rss_bytes", 5 << 20},
                    {"final_train_loss", 2.5}, {"val_loss", nullptr},   {"skipped_steps", 1},
                    {"diverged", false},       {"elapsed_s", 1.25}};
  run["steps"] = json::array({{{"step", 1}, {"loss", 3.0}, {"loss_scale", 65536.0}, {"skipped", true}}});
  r["runs"] = json::array({run});
  return r;
}

TEST(ReportHtml, HostileLabelIsEscaped) {
  const std::string html = render_report_html(one_run("</script><b>x</b>"));
  EXPECT_EQ(html.find("</script><b>"), std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;"), std::string::npos);  // the table cell
  EXPECT_NE(html.find("\\u003c/script>\\u003cb>x\\u003c/b>"), std::string::npos);  // the embedded JSON
}

TEST(ReportHtml, TableConfigMachineAndInlineChartJs) {
  const std::string html = render_report_html(one_run("bf16-mixed"));
  EXPECT_NE(
      html.find(
          "<tr data-run=\"bf16-mixed\"><td>bf16-mixed</td><td>1.25</td><td>1234</td><td>3.0</td><td>5.0</td>"
          "<td>2.5000</td><td>&ndash;</td><td>1</td><td>no</td></tr>"),
      std::string::npos);
  EXPECT_NE(html.find("<th>model</th><td>gpt-nano</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>cpu</th><td>test cpu</td>"), std::string::npos);
  EXPECT_NE(html.find("Chart.js v3"), std::string::npos);  // the library itself, not a link to it
  EXPECT_EQ(html.find("<script src"), std::string::npos);
}

TEST(ReportHtml, Fp8ScalesChartOnlyWhenARunHasThem) {
  json r = one_run("fp8-mixed");
  EXPECT_EQ(render_report_html(r).find("<canvas id=\"chart-fp8-scales\""), std::string::npos);
  r["runs"][0]["fp8_scales"]["input/transformer.h.1.mlp.c_fc"] =
      json::array({json::array({1, 1.0}), json::array({3, 57.5})});
  const std::string html = render_report_html(r);
  EXPECT_NE(html.find("<canvas id=\"chart-fp8-scales\""), std::string::npos);
  EXPECT_NE(html.find("input/transformer.h.1.mlp.c_fc"), std::string::npos);  // in the data
}

TEST(ReportHtml, MissingMachineSaysSo) {
  json r = one_run("x");
  r["machine"] = json::object();
  EXPECT_NE(render_report_html(r).find("not recorded in the inputs"), std::string::npos);
}

}  // namespace
}  // namespace mixtrain
