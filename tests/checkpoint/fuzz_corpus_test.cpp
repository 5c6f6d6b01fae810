// The committed libFuzzer seeds (fuzz/corpus/, written by fuzz/make_seed_corpus.py) are what
// they claim: the valid ones parse, so the fuzzers start from inputs that reach deep code.
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/safetensors.h"
#include "checkpoint/training_state.h"
#include "core/file_io.h"
#include "core/json_input.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/data/wordpiece.h"
#include "mixtrain/models/encoder.h"
#include "models/encoder_config.h"
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

TEST(FuzzCorpus, VocabSeeds) {
  const WordPieceTokenizer b = WordPieceTokenizer::from_vocab_file(kCorpus + "vocab/bert_sample");
  EXPECT_EQ(b.vocab_size(), 600);
  EXPECT_EQ(b.unk_id(), 5);  // after [PAD] and [unused0] .. [unused3], as in BERT's order
  EXPECT_EQ(
      b.tokenize("the caf\u00e9 [MASK]"),
      (std::vector<int32_t>{b.id("the"), b.id("c"), b.id("##a"), b.id("##f"), b.id("##e"), b.id("[MASK]")}));
  EXPECT_EQ(WordPieceTokenizer::from_vocab_file(kCorpus + "vocab/specials_only").vocab_size(), 5);
  // CRLF and trailing blanks trimmed, no newline after the last token.
  const WordPieceTokenizer c = WordPieceTokenizer::from_vocab_file(kCorpus + "vocab/crlf_trailing_blanks");
  EXPECT_EQ(c.vocab_size(), 16);
  EXPECT_EQ(c.sep_id(), 3);
  EXPECT_EQ(c.id("!"), 15);
  EXPECT_EQ(c.tokenize("unaffable caf\u00e9"), (std::vector<int32_t>{0, 1, 2, 7, 9}));
  for (const char* name : {"duplicate_after_trim", "no_unk", "bad_utf8", "empty_line"}) {
    SCOPED_TRACE(name);
    EXPECT_THROW(WordPieceTokenizer::from_vocab_file(kCorpus + "vocab/" + name), IoError);
  }
}

TEST(FuzzCorpus, EncoderConfigSeeds) {
  const auto config = [](const std::string& name) {
    const auto b = seed("encoder_config/" + name);
    return EncoderConfig::from_hf_json(
        parse_untrusted_json(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), name),
        name);
  };
  EXPECT_EQ(config("minilm").hidden, 384);
  EXPECT_EQ(config("distilbert").family, EncoderFamily::distilbert);
  // Small enough for encoder_config_fuzz to build the model (at most 2^15 encoder parameters).
  EXPECT_EQ(config("tiny_bert_saved").encoder_parameters(), 2000);
  EXPECT_TRUE(config("tiny_distilbert_sinusoidal").sinusoidal_positions);
  EXPECT_LE(config("tiny_distilbert_sinusoidal").encoder_parameters(), 1 << 15);
  EXPECT_THROW(config("relu"), ArgumentError);
  EXPECT_THROW(config("not_divisible"), ArgumentError);
  // id2label is saved_classifier_options', which reads a directory's config.json.
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "fuzz_corpus_encoder_config";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kCorpus + "encoder_config/tiny_bert_saved", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const ClassifierOptions o = saved_classifier_options(dir.string());
  EXPECT_EQ(o.labels, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_EQ(o.pooling, Pooling::mean);
  std::filesystem::copy_file(kCorpus + "encoder_config/bad_id2label", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_NO_THROW(config("bad_id2label"));
  EXPECT_THROW(saved_classifier_options(dir.string()), IoError);
}

}  // namespace
}  // namespace mixtrain

namespace mixtrain {
namespace {

// What encoder_config_fuzz found: a config of tens of thousands of one-wide layers built gigabytes
// of tensor metadata before the missing weights were noticed, and a number past fp32's range
// converted to inf (undefined behaviour) and was taken as layer_norm_eps.
TEST(EncoderConfigLimits, LayersAndNumbersAreBounded) {
  nlohmann::json j = parse_untrusted_json(
      R"({"model_type": "bert", "vocab_size": 8, "hidden_size": 2, "num_hidden_layers": 2,
          "num_attention_heads": 1, "intermediate_size": 2, "max_position_embeddings": 4,
          "type_vocab_size": 1})",
      "config");
  EXPECT_EQ(EncoderConfig::from_hf_json(j, "config").layers, 2);
  nlohmann::json deep = j;
  deep["num_hidden_layers"] = 65000;
  EXPECT_THROW(EncoderConfig::from_hf_json(deep, "config"), ArgumentError);
  nlohmann::json inf_eps = j;
  inf_eps["layer_norm_eps"] = 1e39;
  EXPECT_THROW(EncoderConfig::from_hf_json(inf_eps, "config"), ArgumentError);
  nlohmann::json bad_init = j;
  bad_init["initializer_range"] = -1.0;
  EXPECT_THROW(EncoderConfig::from_hf_json(bad_init, "config"), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
