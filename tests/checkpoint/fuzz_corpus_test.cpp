// The committed libFuzzer seeds (fuzz/corpus/, written by fuzz/make_seed_corpus.py) are what
// they claim: the valid ones parse, so the fuzzers start from inputs that reach deep code.
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/file_io.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/training_state.h"
#include "mixtrain/checkpoint/load_model.h"
#include "models/gpt_config_json.h"

namespace mixtrain {
namespace {

const std::string kCorpus = std::string(MIXTRAIN_SOURCE_DIR) + "/fuzz/corpus/";

std::vector<uint8_t> seed(const std::string& rel) {
  return read_file_bounded(kCorpus + rel, 1 << 20, "seed");
}

TEST(FuzzCorpus, SafetensorsSeeds) {
  EXPECT_TRUE(SafetensorsFile::parse(seed("safetensors/empty"), "empty").entries().empty());
  const SafetensorsFile f = SafetensorsFile::parse(seed("safetensors/mixed_dtypes"), "mixed");
  EXPECT_EQ(f.entries().size(), 4u);
  EXPECT_EQ(f.tensor(*f.find("transformer.ln_f.bias")).to_floats(), (std::vector<float>{1.f, -2.f}));
  EXPECT_NO_THROW(SafetensorsFile::parse(seed("safetensors/one_tensor"), "one"));
  EXPECT_THROW(SafetensorsFile::parse(seed("safetensors/truncated"), "truncated"), IoError);
}

TEST(FuzzCorpus, TrainingStateSeeds) {
  for (const char* name : {"adamw_f32", "sgd_bf16", "adamw_bf16_kahan"}) {
    SCOPED_TRACE(name);
    const TrainingState s = decode_training_state(seed(std::string("training_state/") + name), name);
    EXPECT_EQ(s.step, 3);
  }
}

TEST(FuzzCorpus, ConfigSeeds) {
  const auto text = [](const std::string& rel) {
    const auto b = seed(rel);
    return std::string(b.begin(), b.end());
  };
  EXPECT_EQ(gpt_config_from_hf_json(text("config/hf_gpt2"), "hf").vocab_size, 50257);
  EXPECT_EQ(gpt_config_from_json(nlohmann::json::parse(text("config/mixtrain")), "m").n_layer, 2);
  EXPECT_THROW(gpt_config_from_json(nlohmann::json::parse(text("config/bad_type")), "b"), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
