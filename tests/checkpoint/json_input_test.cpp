// JSON from untrusted files: deep nesting and duplicate keys refused, messages one line even for
// hostile values (nested containers, keys with newlines).
#include "core/json_input.h"

#include <gtest/gtest.h>

#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/safetensors.h"
#include "core/printable.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/models/gpt.h"
#include "models/gpt_config_json.h"

namespace mixtrain {
namespace {

using testing_ckpt::expect_error;

std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonInput, DepthLimit) {
  EXPECT_NO_THROW(parse_untrusted_json("{\"a\": " + nested(kMaxJsonDepth - 2) + "}", "x"));
  expect_error<IoError>([] { parse_untrusted_json("{\"a\": " + nested(200000) + "}", "cfg.json"); },
                        {"cfg.json nests deeper than 64 levels"});
  expect_error<IoError>([] { parse_untrusted_ordered_json(nested(100), "m"); }, {"m nests deeper"});
}

TEST(JsonInput, DuplicatesAndSyntax) {
  expect_error<IoError>([] { parse_untrusted_json(R"({"a": {"b": 1, "b": 2}})", "x.json"); },
                        {"x.json has duplicate key 'b'"});
  EXPECT_NO_THROW(parse_untrusted_json(R"({"a": {"b": 1}, "c": {"b": 2}})", "x"));  // same key, other objects
  expect_error<IoError>([] { parse_untrusted_json("{\"a\": 1", "x.json"); }, {"x.json is not valid JSON"});
  expect_error<IoError>([] { parse_untrusted_json("{\"a\n\": \"\xFF\"}", "x.json"); },
                        {"x.json is not valid JSON"});
}

TEST(JsonInput, Excerpt) {
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("[1, 2]")), "an array");
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("{}")), "an object");
  EXPECT_EQ(json_excerpt(nlohmann::json("a\nb")), "\"a\\x5cnb\"");  // JSON-escaped, then printable()
  EXPECT_EQ(json_excerpt(nlohmann::json(3)), "3");
}

TEST(JsonInput, HostileSafetensorsHeaderAndConfigs) {
  const std::string deep = R"({"a":{"dtype":"F32","shape":)" + nested(100000) + R"(,"data_offsets":[0,0]}})";
  expect_error<IoError>([&] { SafetensorsFile::parse(testing_ckpt::image(deep, 0), "deep.st"); },
                        {"safetensors file deep.st: header nests deeper"});
  expect_error<IoError>(
      [] { gpt_config_from_hf_json("{\"n_embd\": " + nested(100000) + "}", "config.json"); },
      {"config config.json nests deeper"});
  // GptConfig::from_json (the --model FILE.json path, parsed by nlohmann directly): a deeply
  // nested value and a key with a newline still give one-line messages, without recursion.
  const nlohmann::json deep_value = nlohmann::json::parse("{\"n_layer\": " + nested(100000) + "}");
  expect_error<ArgumentError>([&] { gpt_config_from_json(deep_value, "m.json"); },
                              {"'n_layer' must be an integer, got an array"});
  expect_error<ArgumentError>([] { gpt_config_from_json(nlohmann::json::parse(R"({"a\nb": 1})"), "m.json"); },
                              {"unknown model config key"});
  expect_error<ArgumentError>(
      [] { gpt_config_from_json(nlohmann::json::parse(R"({"name": "x\ny"})"), "m.json"); },
      {"control character"});
}

}  // namespace
}  // namespace mixtrain
