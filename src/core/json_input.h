// JSON from files mixtrain did not necessarily write (safetensors headers, training states,
// manifests, model configs). nlohmann's parser is iterative, but dumping or comparing a value
// recurses, so a hostile file could nest a few hundred thousand arrays and overflow the stack:
// input is refused past kMaxJsonDepth levels, and duplicate keys (which nlohmann would silently
// collapse to the last) are refused too.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mixtrain {

constexpr int kMaxJsonDepth = 64;

// IoError "<what> is not valid JSON: ...", "<what> nests deeper than 64 levels" or
// "<what> has duplicate key 'k'".
nlohmann::json parse_untrusted_json(std::string_view text, const std::string& what);
nlohmann::ordered_json parse_untrusted_ordered_json(std::string_view text, const std::string& what);

// The same checks for one record of a file read record by record (a JSONL line), whose messages
// name the file and line themselves: "" with `out` set, or the problem ("not valid JSON (...)",
// "JSON nested deeper than 64 levels", "duplicate key 'k'").
std::string parse_untrusted_json_line(std::string_view text, nlohmann::json& out);

// A value for a one-line message: scalars as JSON (cut to max_len), containers by kind.
std::string json_excerpt(const nlohmann::json& v, size_t max_len = 60);
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_len = 60);

}  // namespace mixtrain
