// The report page (report/report.h): a table rendered here, charts drawn in the browser by
// Chart.js from the report model embedded as JSON. Everything is inline: the page works offline
// and as a mail attachment.
//
// For tests and people alike the page says what it drew: each chart's <canvas> gets
// data-series (the datasets' labels, '|'-separated), data-points (each dataset's points that
// have a value) and data-painted (pixels that are not transparent after drawing); <body> gets
// data-charts-drawn, data-render-ms and, if the script failed, data-error.
#include <cmath>
#include <cstdio>
#include <string_view>

#include "report/report.h"

namespace mixtrain {

extern const std::string_view kChartJsSource;  // build/generated/chartjs_source.cpp

namespace {
using json = nlohmann::ordered_json;

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON inside <script>: "</" would end the element, so every '<' is written as \u003c.
std::string script_json(const json& j) {
  const std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

std::string cell_number(const json& v, const char* fmt, double scale = 1) {
  if (!v.is_number()) return "&ndash;";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v.get<double>() * scale);
  return b;
}

std::string cell_text(const json& v) {
  if (v.is_null()) return "&ndash;";
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_string()) return escape_html(v.get<std::string>());
  if (v.is_number_float()) {  // 6 significant digits: a float option (lr 1e-3) stored as double
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v.get<double>());
    return b;
  }
  return escape_html(v.dump());
}

std::string key_value_table(const char* id, const json& obj) {
  std::string t = std::string("<table class=\"kv\" id=\"") + id + "\">";
  if (!obj.is_object() || obj.empty()) return t + "<tr><td>not recorded in the inputs</td></tr></table>";
  for (const auto& [k, v] : obj.items())
    t += "<tr><th>" + escape_html(k) + "</th><td>" + cell_text(v) + "</td></tr>";
  return t + "</table>";
}

std::string comparison_table(const json& runs) {
  std::string t =
      "<table id=\"comparison\"><thead><tr><th>precision</th><th>time (s)</th><th>tokens/s</th>"
      "<th>peak memory (MiB)</th><th>peak RSS (MiB)</th><th>final train loss</th><th>val "
      "loss</th><th>skipped steps</th>"
      "<th>diverged</th></tr></thead><tbody>";
  for (const json& run : runs) {
    const json s = run.contains("summary") && run["summary"].is_object() ? run["summary"] : json::object();
    auto get = [&](const char* k) { return s.contains(k) ? s[k] : json(); };
    t += "<tr data-run=\"" + escape_html(run["label"].get<std::string>()) + "\"><td>" +
         escape_html(run["label"].get<std::string>()) + "</td><td>" + cell_number(get("elapsed_s"), "%.2f") +
         "</td><td>" + cell_number(get("tokens_per_s"), "%.0f") + "</td><td>" +
         cell_number(get("peak_bytes"), "%.1f", 1.0 / (1 << 20)) + "</td><td>" +
         cell_number(get("peak_rss_bytes"), "%.1f", 1.0 / (1 << 20)) + "</td><td>" +
         cell_number(get("final_train_loss"), "%.4f") + "</td><td>" + cell_number(get("val_loss"), "%.4f") +
         "</td><td>" + cell_text(get("skipped_steps")) + "</td><td>" + cell_text(get("diverged")) +
         "</td></tr>";
  }
  return t + "</tbody></table>";
}

constexpr std::string_view kStyle = R"css(
body { font: 14px/1.4 "DejaVu Sans", sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, .kv th { text-align: left; }
.kv td { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; }
.sources { font-size: 12px; color: #666; }
)css";

// Chart drawing. Runs after Chart.js; reads the model from #report-data.
constexpr std::string_view kScript = R"js(
(function () {
  const t0 = performance.now();
  const report = JSON.parse(document.getElementById('report-data').textContent);
  const palette = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
                   '#bcbd22', '#17becf'];
  const color = (i) => palette[i % palette.length];
  const num = (v) => (typeof v === 'number' && isFinite(v)) ? v : null;
  let drawn = 0;
  function finish(canvas, chart) {
    const ctx = canvas.getContext('2d');
    const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let painted = 0;
    for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) painted++;
    canvas.dataset.series = chart.data.datasets.map((d) => d.label).join('|');
    // Points with a value per dataset (a bar is a number, a line point {x, y}).
    canvas.dataset.points = chart.data.datasets.map((d) => d.data.filter((p) =>
      (typeof p === 'number' && p > 0) || (p !== null && typeof p === 'object' && p.y !== null)).length).join('|');
    canvas.dataset.painted = String(painted);
    if (painted > 0) drawn++;
  }
  const common = { animation: false, responsive: false, devicePixelRatio: 1, normalized: true,
                   plugins: { legend: { position: 'bottom' } } };
  function lineChart(id, datasets, yTitle, yType) {
    const canvas = document.getElementById(id);
    const chart = new Chart(canvas, { type: 'line', data: { datasets },
      options: Object.assign({}, common, { parsing: false, spanGaps: true,
        scales: { x: { type: 'linear', title: { display: true, text: 'step' } },
                  y: { type: yType || 'linear', title: { display: true, text: yTitle } } } }) });
    finish(canvas, chart);
  }
  const runs = report.runs;
  // Training (solid) and validation (dashed, points) loss of every run on one chart.
  const loss = [];
  runs.forEach((r, i) => {
    loss.push({ label: r.label + ' train', borderColor: color(i), backgroundColor: color(i), pointRadius: 0,
                borderWidth: 1.5, data: r.steps.map((s) => ({ x: s.step, y: num(s.loss) })) });
    const val = r.steps.filter((s) => 'val_loss' in s);
    if (val.length) loss.push({ label: r.label + ' val', borderColor: color(i), backgroundColor: color(i),
                                borderDash: [6, 4], pointRadius: 3, borderWidth: 1.5,
                                data: val.map((s) => ({ x: s.step, y: num(s.val_loss) })) });
  });
  lineChart('chart-loss', loss, 'loss');
  // The loss scale of every run (log axis), skipped steps as crosses on their run's line.
  const scale = [];
  runs.forEach((r, i) => {
    scale.push({ label: r.label, borderColor: color(i), backgroundColor: color(i), pointRadius: 0, borderWidth: 1.5,
                 data: r.steps.map((s) => ({ x: s.step, y: num(s.loss_scale) })) });
    const skipped = r.steps.filter((s) => s.skipped);
    if (skipped.length) scale.push({ label: r.label + ' skipped', type: 'line', showLine: false,
      pointStyle: 'crossRot', pointRadius: 6, borderWidth: 2, borderColor: color(i), backgroundColor: color(i),
      data: skipped.map((s) => ({ x: s.step, y: num(s.loss_scale) })) });
  });
  lineChart('chart-loss-scale', scale, 'loss scale', 'logarithmic');
  // fp8-mixed's delayed-scaling scales per layer and role, every run (log axis), when any has them.
  if (document.getElementById('chart-fp8-scales')) {
    const fp8 = [];
    let k = 0;
    runs.forEach((r) => {
      Object.keys(r.fp8_scales || {}).forEach((series) => {
        fp8.push({ label: (runs.length > 1 ? r.label + ' ' : '') + series, borderColor: color(k),
                   backgroundColor: color(k), pointRadius: 2, borderWidth: 1.2,
                   data: r.fp8_scales[series].map((p) => ({ x: p[0], y: num(p[1]) })) });
        k++;
      });
    });
    lineChart('chart-fp8-scales', fp8, 'fp8 scale', 'logarithmic');
  }
  // Peak memory by category, one stacked bar per run.
  const cats = [];
  runs.forEach((r) => {
    const by = (r.summary && r.summary.peak_bytes_by_category) || {};
    Object.keys(by).forEach((c) => { if (!cats.includes(c)) cats.push(c); });
  });
  const memCanvas = document.getElementById('chart-memory');
  const mem = new Chart(memCanvas, { type: 'bar',
    data: { labels: runs.map((r) => r.label),
            datasets: cats.map((c, k) => ({ label: c, backgroundColor: color(k),
              data: runs.map((r) => { const by = (r.summary && r.summary.peak_bytes_by_category) || {};
                                      return (by[c] || 0) / 1048576; }) })) },
    options: Object.assign({}, common, { scales: { x: { stacked: true },
      y: { stacked: true, title: { display: true, text: 'peak MiB (per category)' } } } }) });
  finish(memCanvas, mem);
  document.body.dataset.chartsDrawn = String(drawn);
  document.body.dataset.renderMs = String(Math.round(performance.now() - t0));
})();
)js";

}  // namespace

std::string render_report_html(const json& report) {
  const std::string title = escape_html(report.value("title", std::string("mixtrain report")));
  std::string h;
  h.reserve(kChartJsSource.size() + 65536);
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + title + "</title><style>";
  h += kStyle;
  h += "</style></head>\n<body>\n<script>window.addEventListener('error', function (e) { "
       "document.body.dataset.error = String(e.message); });</script>\n";
  h += "<h1>" + title + "</h1>\n";
  h += "<p class=\"sources\">from: ";
  for (const json& s : report.value("sources", json::array())) h += "<code>" + cell_text(s) + "</code> ";
  h += "</p>\n<h2>Comparison</h2>\n" + comparison_table(report["runs"]) + "\n";
  h += "<h2>Curves</h2>\n<div class=\"charts\">"
       "<figure><canvas id=\"chart-loss\" width=\"720\" height=\"380\"></canvas><figcaption>training loss "
       "(solid) "
       "and validation loss (dashed) per run</figcaption></figure>"
       "<figure><canvas id=\"chart-loss-scale\" width=\"720\" height=\"320\"></canvas><figcaption>loss scale "
       "per "
       "step (log axis); crosses mark skipped steps</figcaption></figure>"
       "<figure><canvas id=\"chart-memory\" width=\"720\" height=\"340\"></canvas><figcaption>peak memory by "
       "category</figcaption></figure>";
  bool fp8 = false;
  for (const json& r : report.value("runs", json::array())) fp8 = fp8 || r.contains("fp8_scales");
  if (fp8)
    h += "<figure><canvas id=\"chart-fp8-scales\" width=\"720\" height=\"380\"></canvas><figcaption>fp8 "
         "scales per layer and role (delayed scaling, the sampled steps of --numerics; log axis)</figcaption>"
         "</figure>";
  h += "</div>\n";
  h += "<h2>Configuration</h2>\n" + key_value_table("config", report.value("config", json())) + "\n";
  h += "<h2>Machine</h2>\n" + key_value_table("machine", report.value("machine", json())) + "\n";
  h += "<script id=\"report-data\" type=\"application/json\">" + script_json(report) + "</script>\n";
  h += "<script>/* Chart.js (MIT License), from Debian's libjs-chart.js */\n";
  h += kChartJsSource;
  h += "\n</script>\n<script>";
  h += kScript;
  h += "</script>\n</body></html>\n";
  return h;
}

}  // namespace mixtrain
