// Depth-limited, duplicate-rejecting JSON parsing for untrusted files.
#include "core/json_input.h"

#include <set>
#include <vector>

#include "core/printable.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

// What was wrong with a JSON text, and the value when nothing was.
template <typename Json>
struct Parsed {
  Json value;
  enum class Problem { none, invalid, too_deep, duplicate } problem = Problem::none;
  std::string detail;  // the parser's message, or the duplicate key
};

template <typename Json>
Parsed<Json> parse_limited(std::string_view text) {
  std::vector<std::set<std::string>> open_objects;  // keys seen in each enclosing object
  std::string duplicate;
  bool too_deep = false;
  auto on_event = [&](int depth, typename Json::parse_event_t ev, Json& parsed) {
    using E = typename Json::parse_event_t;
    if (depth > kMaxJsonDepth) too_deep = true;
    if (ev == E::object_start) {
      open_objects.emplace_back();
    } else if (ev == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (ev == E::key && !open_objects.empty() && parsed.is_string()) {
      if (!open_objects.back().insert(parsed.template get<std::string>()).second && duplicate.empty())
        duplicate = parsed.template get<std::string>();
    }
    // Past the limit nothing more is kept (the value is dropped from the tree), so the result
    // never holds deep nesting even before the error below is raised.
    return !too_deep;
  };
  Parsed<Json> out;
  using P = typename Parsed<Json>::Problem;
  try {
    out.value = Json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    out.problem = P::invalid;
    out.detail = printable(e.what(), 160);
    return out;
  }
  if (too_deep) {
    out.problem = P::too_deep;
  } else if (!duplicate.empty()) {
    out.problem = P::duplicate;
    out.detail = printable(duplicate);
  }
  return out;
}

template <typename Json>
Json parse_or_throw(std::string_view text, const std::string& what) {
  Parsed<Json> p = parse_limited<Json>(text);
  using P = typename Parsed<Json>::Problem;
  switch (p.problem) {
    case P::none:
      return std::move(p.value);
    case P::invalid:
      throw IoError(what + " is not valid JSON: " + p.detail);
    case P::too_deep:
      throw IoError(what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    case P::duplicate:
      throw IoError(what + " has duplicate key '" + p.detail + "'");
  }
  return {};
}

template <typename Json>
std::string excerpt(const Json& v, size_t max_len) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return printable(v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace), max_len);
}

}  // namespace

nlohmann::json parse_untrusted_json(std::string_view text, const std::string& what) {
  return parse_or_throw<nlohmann::json>(text, what);
}
nlohmann::ordered_json parse_untrusted_ordered_json(std::string_view text, const std::string& what) {
  return parse_or_throw<nlohmann::ordered_json>(text, what);
}
std::string parse_untrusted_json_line(std::string_view text, nlohmann::json& out) {
  Parsed<nlohmann::json> p = parse_limited<nlohmann::json>(text);
  using P = Parsed<nlohmann::json>::Problem;
  switch (p.problem) {
    case P::none:
      out = std::move(p.value);
      return "";
    case P::invalid:
      return "not valid JSON (" + p.detail + ")";
    case P::too_deep:
      return "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    case P::duplicate:
      return "duplicate key '" + p.detail + "'";
  }
  return "";
}
std::string json_excerpt(const nlohmann::json& v, size_t max_len) { return excerpt(v, max_len); }
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_len) { return excerpt(v, max_len); }

}  // namespace mixtrain
