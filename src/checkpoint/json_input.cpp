// Depth-limited, duplicate-rejecting JSON parsing for untrusted files.
#include "checkpoint/json_input.h"

#include <set>
#include <vector>

#include "checkpoint/file_io.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

template <typename Json>
Json parse_limited(std::string_view text, const std::string& what) {
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
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(what + " is not valid JSON: " + printable(e.what(), 160));
  }
  if (too_deep) throw IoError(what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  if (!duplicate.empty()) throw IoError(what + " has duplicate key '" + printable(duplicate) + "'");
  return j;
}

template <typename Json>
std::string excerpt(const Json& v, size_t max_len) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return printable(v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace), max_len);
}

}  // namespace

nlohmann::json parse_untrusted_json(std::string_view text, const std::string& what) {
  return parse_limited<nlohmann::json>(text, what);
}
nlohmann::ordered_json parse_untrusted_ordered_json(std::string_view text, const std::string& what) {
  return parse_limited<nlohmann::ordered_json>(text, what);
}
std::string json_excerpt(const nlohmann::json& v, size_t max_len) { return excerpt(v, max_len); }
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_len) { return excerpt(v, max_len); }

}  // namespace mixtrain
