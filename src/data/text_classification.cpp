// Labelled text from TSV, CSV (RFC 4180) and JSONL files, and the built-in classification tasks
// (see text_classification.h). Every row error names the file and the line the row starts on.
#include "mixtrain/data/text_classification.h"

#include <unicode/utf8.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_input.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/builtin_data.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {

namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) throw IoError("data file '" + path + "': no such file");
  if (st.type() == fs::file_type::directory)
    throw IoError("data file '" + path + "': is a directory, not a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError("data file '" + path + "': cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw IoError("data file '" + path + "': read error");
  return std::move(s).str();
}

// A row as parsed: its fields and the line it starts on.
struct Row {
  std::vector<std::string> fields;
  int64_t line = 0;
};

[[noreturn]] void row_error(const std::string& name, int64_t line, const std::string& what) {
  throw IoError(name + ":" + std::to_string(line) + ": " + what);
}

void check_utf8(const std::string& name, int64_t line, const std::string& s, const std::string& column) {
  if (s.size() > size_t(INT32_MAX))
    row_error(name, line, "column '" + column + "' is longer than 2^31 - 1 bytes");
  const int32_t n = int32_t(s.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s.data(), i, n, c);
    if (c < 0) row_error(name, line, "column '" + column + "' is not valid UTF-8");
  }
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Lines without their \n (and a \r before it); the line after a final \n is not a line.
std::vector<std::pair<std::string_view, int64_t>> split_lines(std::string_view text) {
  std::vector<std::pair<std::string_view, int64_t>> lines;
  int64_t number = 1;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(start, end - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    lines.emplace_back(l, number++);
    start = end + 1;
  }
  return lines;
}

std::vector<Row> parse_tsv(std::string_view text) {
  std::vector<Row> rows;
  for (const auto& [l, number] : split_lines(text)) {
    if (blank(l)) continue;
    Row r;
    r.line = number;
    size_t start = 0;
    for (;;) {
      const size_t tab = l.find('\t', start);
      r.fields.emplace_back(
          l.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

// RFC 4180, accepting LF as well as CRLF. A quoted field runs to the next lone quote; a quote
// inside an unquoted field, or anything but a separator after a closing quote, is an error.
std::vector<Row> parse_csv(std::string_view text, const std::string& name) {
  std::vector<Row> rows;
  int64_t line = 1;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    // A blank line (or the end) is no record.
    size_t eol = text.find('\n', i);
    if (eol == std::string_view::npos) eol = n;
    if (blank(text.substr(i, eol - i)) && text.substr(i, eol - i).find('"') == std::string_view::npos) {
      i = eol + 1;
      ++line;
      continue;
    }
    Row r;
    r.line = line;
    for (;;) {  // one field per turn
      std::string field;
      if (i < n && text[i] == '"') {
        const int64_t opened = line;
        ++i;
        for (;;) {
          if (i >= n) row_error(name, opened, "a quoted field is not closed before the end of the file");
          const char c = text[i++];
          if (c == '"') {
            if (i < n && text[i] == '"') {
              field += '"';
              ++i;
              continue;
            }
            break;
          }
          if (c == '\n') ++line;
          field += c;
        }
        if (i < n && text[i] == '\r' && (i + 1 == n || text[i + 1] == '\n')) ++i;
        if (i < n && text[i] != ',' && text[i] != '\n')
          row_error(name, line,
                    "text after the closing quote of a field (RFC 4180: a quote in a field is \"\")");
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n') {
          if (text[i] == '"')
            row_error(name, line, "a quote inside an unquoted field (quote the field, \"\" for a quote)");
          field += text[i++];
        }
        if (!field.empty() && field.back() == '\r' && (i == n || text[i] == '\n')) field.pop_back();
      }
      r.fields.push_back(std::move(field));
      if (i < n && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < n) {  // '\n'
        ++i;
        ++line;
      }
      break;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

struct Columns {
  int64_t text = -1, pair = -1, label = -1;
  size_t count = 0;
};

Columns find_columns(const Row& header, const TextColumns& want, const std::string& name) {
  Columns c;
  c.count = header.fields.size();
  std::map<std::string, int64_t> at;
  for (size_t k = 0; k < header.fields.size(); ++k) {
    check_utf8(name, header.line, header.fields[k], "header");
    if (!at.emplace(header.fields[k], int64_t(k)).second)
      row_error(name, header.line, "column '" + header.fields[k] + "' appears twice in the header");
  }
  const auto find = [&](const std::string& col, const char* role) {
    const auto it = at.find(col);
    if (it == at.end()) {
      std::string have;
      for (const std::string& f : header.fields) have += (have.empty() ? "'" : ", '") + f + "'";
      row_error(name, header.line,
                std::string("no ") + role + " column '" + col + "' (the header has " + have + ")");
    }
    return it->second;
  };
  c.text = find(want.text, "text");
  if (!want.text_pair.empty()) c.pair = find(want.text_pair, "text pair");
  c.label = find(want.label, "label");
  return c;
}

// Raw examples (label as a name) before the names become ids.
struct RawExample {
  std::string text, pair, label;
  int64_t line;
};

std::vector<RawExample> from_rows(std::vector<Row> rows, const TextColumns& want, const std::string& name) {
  if (rows.empty()) throw IoError("data file '" + name + "': no header line (the file is empty)");
  const Columns c = find_columns(rows[0], want, name);
  std::vector<RawExample> out;
  out.reserve(rows.size() - 1);
  for (size_t k = 1; k < rows.size(); ++k) {
    Row& r = rows[k];
    if (r.fields.size() != c.count)
      row_error(name, r.line,
                "expected " + std::to_string(c.count) + " fields (as the header), got " +
                    std::to_string(r.fields.size()));
    RawExample e{std::move(r.fields[size_t(c.text)]), c.pair >= 0 ? std::move(r.fields[size_t(c.pair)]) : "",
                 std::move(r.fields[size_t(c.label)]), r.line};
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<RawExample> parse_jsonl(std::string_view text, const TextColumns& want, const std::string& name) {
  std::vector<RawExample> out;
  for (const auto& [l, line_number] : split_lines(text)) {
    if (blank(l)) continue;
    const int64_t number = line_number;  // (clang 14 cannot capture a structured binding)
    nlohmann::json j;
    // Depth-limited and without duplicate keys, as every JSON mixtrain reads (core/json_input.h).
    if (const std::string problem = parse_untrusted_json_line(l, j); !problem.empty())
      row_error(name, number, problem);
    if (!j.is_object()) row_error(name, number, "not a JSON object");
    const auto text_of = [&](const std::string& col, const char* role) -> std::string {
      const auto it = j.find(col);
      if (it == j.end()) row_error(name, number, std::string("no ") + role + " field '" + col + "'");
      if (!it->is_string())
        row_error(name, number, std::string(role) + " field '" + col + "' is not a string");
      return it->get<std::string>();
    };
    RawExample e;
    e.line = number;
    e.text = text_of(want.text, "text");
    if (!want.text_pair.empty()) e.pair = text_of(want.text_pair, "text pair");
    const auto it = j.find(want.label);
    if (it == j.end()) row_error(name, number, "no label field '" + want.label + "'");
    if (it->is_string()) {
      e.label = it->get<std::string>();
    } else if (it->is_number_integer()) {
      e.label = it->dump();
    } else {
      row_error(name, number, "label field '" + want.label + "' is neither a string nor an integer");
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

TextFormat text_format_from_path(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".tsv") return TextFormat::tsv;
  if (ext == ".csv") return TextFormat::csv;
  if (ext == ".jsonl") return TextFormat::jsonl;
  std::error_code ec;
  if (fs::is_directory(path, ec))  // ".", "data/": a directory, not a format without a name
    throw ArgumentError("data file '" + path + "' is a directory, not a .tsv, .csv or .jsonl file");
  if (ext.empty())
    throw ArgumentError("data file '" + path +
                        "' has no extension to tell its format: name it .tsv, .csv or .jsonl");
  throw ArgumentError("data file '" + path + "': unknown format '" + ext + "' (use .tsv, .csv or .jsonl)");
}

TextClassificationData TextClassificationData::parse(std::string_view content, TextFormat format,
                                                     const std::string& name, const TextColumns& columns,
                                                     const std::vector<std::string>* labels) {
  if (columns.text.empty() || columns.label.empty())
    throw ArgumentError("data file '" + name + "': the text and label column names must not be empty");
  std::vector<RawExample> raw;
  switch (format) {
    case TextFormat::tsv:
      raw = from_rows(parse_tsv(content), columns, name);
      break;
    case TextFormat::csv:
      raw = from_rows(parse_csv(content, name), columns, name);
      break;
    case TextFormat::jsonl:
      raw = parse_jsonl(content, columns, name);
      break;
  }
  TextClassificationData d;
  d.path = name;
  if (labels) {
    d.labels = *labels;
  } else {
    for (const RawExample& e : raw) d.labels.push_back(e.label);
    std::sort(d.labels.begin(), d.labels.end());
    d.labels.erase(std::unique(d.labels.begin(), d.labels.end()), d.labels.end());
  }
  std::map<std::string, int32_t> id;
  for (size_t k = 0; k < d.labels.size(); ++k)
    if (!id.emplace(d.labels[k], int32_t(k)).second)
      throw ArgumentError("data file '" + name + "': label '" + d.labels[k] +
                          "' appears twice in the label list");
  d.examples.reserve(raw.size());
  for (RawExample& e : raw) {
    check_utf8(name, e.line, e.text, columns.text);
    if (!columns.text_pair.empty()) check_utf8(name, e.line, e.pair, columns.text_pair);
    check_utf8(name, e.line, e.label, columns.label);
    if (e.label.empty()) row_error(name, e.line, "empty label");
    const auto it = id.find(e.label);
    if (it == id.end()) {
      std::string known;
      for (const std::string& l : d.labels) known += (known.empty() ? "'" : ", '") + l + "'";
      row_error(name, e.line, "label '" + e.label + "' is not one of the known labels (" + known + ")");
    }
    d.examples.push_back(TextExample{std::move(e.text), std::move(e.pair), it->second, e.line});
  }
  return d;
}

TextClassificationData TextClassificationData::load(const std::string& path, const TextColumns& columns,
                                                    const std::vector<std::string>* labels) {
  const TextFormat format = text_format_from_path(path);
  return parse(read_file(path), format, path, columns, labels);
}

std::vector<int64_t> TextClassificationData::class_counts() const {
  std::vector<int64_t> n(labels.size(), 0);
  for (const TextExample& e : examples) ++n[size_t(e.label)];
  return n;
}

double TextClassificationData::majority_baseline() const {
  if (examples.empty()) return 0.0;
  const std::vector<int64_t> n = class_counts();
  return double(*std::max_element(n.begin(), n.end())) / double(examples.size());
}

TextClassificationTask finefoods_task() {
  TextColumns cols;
  cols.text = "review";
  cols.label = "score";
  TextClassificationTask t;
  t.name = "finefoods";
  t.train = TextClassificationData::load(builtin_data_path("finefoods/train.tsv"), cols);
  t.test = TextClassificationData::load(builtin_data_path("finefoods/test.tsv"), cols, &t.train.labels);
  return t;
}

TextClassificationData fortunes_topic_entries(const std::string& fortunes_dir) {
  TextClassificationData d;
  d.path = fortunes_dir;
  for (const char* topic : kFortuneTopics) d.labels.emplace_back(topic);
  for (size_t k = 0; k < d.labels.size(); ++k) {
    const std::string path = (fs::path(fortunes_dir) / d.labels[k]).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw IoError("fortunes file '" + path +
                    "' not found (install Debian's 'fortunes' package: scripts/setup.sh)");
    const std::string text = read_file(path);
    std::string entry;
    int64_t entry_line = 1;
    const auto finish = [&](int64_t next_line) {
      const size_t b = entry.find_first_not_of(" \t\r\n");
      const size_t e = entry.find_last_not_of(" \t\r\n");
      if (b != std::string::npos && e - b + 1 > 20) {
        std::string t = entry.substr(b, e - b + 1);
        check_utf8(path, entry_line, t, "entry");
        d.examples.push_back(TextExample{std::move(t), "", int32_t(k), entry_line});
      }
      entry.clear();
      entry_line = next_line;
    };
    for (const auto& [l, number] : split_lines(text)) {
      if (l == "%") {
        finish(number + 1);
      } else {
        entry.append(l).push_back('\n');
      }
    }
    finish(0);
  }
  return d;
}

TextClassificationTask fortunes_topic_task(const std::string& fortunes_dir, uint64_t seed,
                                           double test_fraction) {
  if (!(test_fraction > 0.0 && test_fraction < 1.0))
    throw ArgumentError("fortunes_topic_task: test_fraction must be in (0, 1), got " +
                        std::to_string(test_fraction));
  TextClassificationData all = fortunes_topic_entries(fortunes_dir);
  const size_t n = all.examples.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  for (size_t i = n; i > 1; --i) {  // Fisher-Yates: position i-1 takes one of [0, i)
    const uint64_t r =
        (uint64_t(counter_rng(seed, 2 * uint64_t(i))) << 32) | counter_rng(seed, 2 * uint64_t(i) + 1);
    std::swap(order[i - 1], order[size_t(r % uint64_t(i))]);
  }
  const size_t n_test = size_t(std::llround(test_fraction * double(n)));
  std::vector<char> is_test(n, 0);
  for (size_t k = 0; k < n_test; ++k) is_test[order[k]] = 1;
  TextClassificationTask t;
  t.name = "fortunes";
  for (TextClassificationData* part : {&t.train, &t.test}) {
    part->path = all.path;
    part->labels = all.labels;
  }
  for (size_t i = 0; i < n; ++i)
    (is_test[i] ? t.test : t.train).examples.push_back(std::move(all.examples[i]));
  return t;
}

}  // namespace mixtrain
