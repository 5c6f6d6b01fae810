// save_encoder_classifier / load_encoder_classifier: a saved classifier reloads to the same logits
// bit for bit, its directory is Hugging Face's (config.json with architectures, id2label,
// label2id, num_labels and every field read; model.safetensors under *ForSequenceClassification
// names; the tokenizer files copied); the bad inputs fail with one-line errors naming the file and
// the key or tensor. The saved directories (build/encoder_interop/*) also carry the batch and
// mixtrain's logits for tools/check_encoder_interop.py, which loads them with transformers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "encoder_fixture_util.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/builtin_data.h"
#include "mixtrain/optim/adamw.h"
#include "models/encoder_model.h"

using namespace mixtrain;
namespace fs = std::filesystem;
using test::kEncoderFixtures;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<int32_t> ints(const Tensor& t) { return t.defined() ? t.to_ints() : std::vector<int32_t>{}; }

// One AdamW step (so the weights are not the loaded ones), save, reload: the same logits, bit for
// bit. Writes the batch and the logits beside the model for the transformers check.
void round_trip(const std::string& src, const std::string& name, const test::Fixture& fx,
                const std::string& tokenizer_dir) {
  const ClassifierOptions o = test::encoder_fixture_options(fx);
  std::unique_ptr<Model> model = load_encoder_classifier(src, o);
  const Batch batch = test::encoder_fixture_batch(fx);
  AdamW opt(model->params(), AdamWConfig{});
  model->params().zero_grads();
  model->forward_batch(batch, true, 1).loss.backward();
  opt.step(model->params(), 1e-2f);
  const std::vector<float> logits = model->forward_batch(batch, false, 0).logits.value().to_floats();

  const fs::path dir = fs::path(MIXTRAIN_BINARY_DIR) / "encoder_interop" / name;
  fs::remove_all(dir);
  save_encoder_classifier(*model, dir.string(), tokenizer_dir);
  std::unique_ptr<Model> back = load_encoder_classifier(dir.string(), o);
  EXPECT_EQ(back->family(), model->family());
  EXPECT_EQ(back->forward_batch(batch, false, 0).logits.value().to_floats(), logits)
      << name << ": reloaded logits";

  const nlohmann::json cfg = nlohmann::json::parse(read_text(dir / "config.json"));
  const bool bert = model->family() == "bert";
  EXPECT_EQ(cfg.at("architectures")[0],
            bert ? "BertForSequenceClassification" : "DistilBertForSequenceClassification");
  EXPECT_EQ(cfg.at("model_type"), model->family());
  EXPECT_EQ(cfg.at("num_labels"), o.labels.size());
  for (size_t i = 0; i < o.labels.size(); ++i) {
    EXPECT_EQ(cfg.at("id2label").at(std::to_string(i)), o.labels[i]);
    EXPECT_EQ(cfg.at("label2id").at(o.labels[i]), i);
  }
  EXPECT_EQ(cfg.at("vocab_size"), dynamic_cast<const EncoderClassifier&>(*model).config().vocab_size);
  for (const char* f : {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    if (!tokenizer_dir.empty() && fs::exists(fs::path(tokenizer_dir) / f)) {
      EXPECT_EQ(read_text(dir / f), read_text(fs::path(tokenizer_dir) / f)) << f;
    }

  nlohmann::json check = {{"input_ids", ints(batch.inputs)},
                          {"token_type_ids", ints(batch.token_types)},
                          {"attention_mask", ints(batch.attention_mask)},
                          {"shape", batch.inputs.shape().to_string()},
                          {"batch", batch.inputs.size(0)},
                          {"seq", batch.inputs.size(1)},
                          {"logits", logits}};
  std::ofstream(dir / "mixtrain_logits.json") << check.dump();
}

template <typename E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& says) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying " << says.front();
  } catch (const E& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    for (const std::string& s : says) EXPECT_NE(m.find(s), std::string::npos) << m;
  }
}

}  // namespace

TEST(EncoderIo, TinyBertAndDistilBertSaveAndReloadToTheSameLogits) {
  const std::string tok = builtin_data_path(kDefaultEncoderModel);  // any tokenizer files, to check the copy
  round_trip(kEncoderFixtures + "bert_tiny", "bert_tiny",
             test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx"), tok);
  round_trip(kEncoderFixtures + "distilbert_tiny", "distilbert_tiny",
             test::load_fixture(kEncoderFixtures + "distilbert_tiny.mtfx"), "");
}

TEST(EncoderIo, MiniLmSavesUnderBertPrefixedNamesAndReloads) {
  const std::string src = builtin_data_path(kDefaultEncoderModel);
  round_trip(src, "minilm", test::load_fixture(kEncoderFixtures + "minilm.mtfx"), src);
}

TEST(EncoderIo, BadDirectoriesAndOptionsFailNamingTheFileAndKey) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  const ClassifierOptions o = test::encoder_fixture_options(fx);
  const fs::path tmp = fs::path(MIXTRAIN_BINARY_DIR) / "encoder_io_errors";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  expect_error<IoError>([&] { load_encoder_classifier((tmp / "none").string(), o); }, {"config.json"});

  const nlohmann::json good = nlohmann::json::parse(read_text(kEncoderFixtures + "bert_tiny/config.json"));
  const auto with_config = [&](const nlohmann::json& j) {
    fs::remove_all(tmp / "m");
    fs::create_directories(tmp / "m");
    std::ofstream(tmp / "m" / "config.json") << j.dump();
    fs::copy_file(kEncoderFixtures + "bert_tiny/model.safetensors", tmp / "m" / "model.safetensors");
    return (tmp / "m").string();
  };
  nlohmann::json j = good;
  j["model_type"] = "gpt2";
  expect_error<IoError>([&] { load_encoder_classifier(with_config(j), o); }, {"config.json", "model_type"});
  j = good;
  j.erase("num_attention_heads");
  expect_error<IoError>([&] { load_encoder_classifier(with_config(j), o); },
                        {"config.json", "num_attention_heads"});
  j = good;
  j["hidden_act"] = "relu";
  expect_error<IoError>([&] { load_encoder_classifier(with_config(j), o); }, {"config.json", "hidden_act"});
  j = good;
  j["intermediate_size"] = 40;  // the file's tensors are (37, 32)
  expect_error<ShapeError>(
      [&] { load_encoder_classifier(with_config(j), o); },
      {"model.safetensors", "bert.encoder.layer.0.intermediate.dense.weight", "(37, 32)"});
  j = good;
  j["num_hidden_layers"] = 3;
  expect_error<IoError>([&] { load_encoder_classifier(with_config(j), o); },
                        {"model.safetensors", "missing tensor", "bert.encoder.layer.2."});

  ClassifierOptions two = o;
  two.labels = {"a", "b"};  // the saved classifier has 3 rows
  expect_error<ShapeError>([&] { load_encoder_classifier(kEncoderFixtures + "bert_tiny", two); },
                           {"classifier.weight"});
  ClassifierOptions one = o;
  one.labels = {"a"};
  expect_error<ArgumentError>([&] { load_encoder_classifier(kEncoderFixtures + "bert_tiny", one); },
                              {"2 labels"});

  std::unique_ptr<Model> m = load_encoder_classifier(kEncoderFixtures + "bert_tiny", o);
  Batch b = test::encoder_fixture_batch(fx);
  b.targets = Tensor::from_ints({0, 1, 2, 0, 1, 2, 0, 1}, {4, 2});
  expect_error<ShapeError>([&] { m->forward_batch(b, false, 0); }, {"targets"});
  b = test::encoder_fixture_batch(fx);
  b.attention_mask = Tensor::from_ints(std::vector<int32_t>(4 * 5, 1), {4, 5});
  expect_error<ShapeError>([&] { m->forward_batch(b, false, 0); }, {"attention_mask"});
  b = test::encoder_fixture_batch(fx);
  b.inputs = Tensor::from_ints(std::vector<int32_t>(4 * 25, 1), {4, 25});  // max_position_embeddings 24
  b.token_types = Tensor();
  b.attention_mask = Tensor();
  expect_error<ShapeError>([&] { m->forward_batch(b, false, 0); }, {"25", "max_position_embeddings"});
  b = test::encoder_fixture_batch(fx);
  b.token_types = Tensor::from_ints(std::vector<int32_t>(4 * 9, 2), {4, 9});  // type_vocab_size 2
  expect_error<ArgumentError>([&] { m->forward_batch(b, false, 0); }, {"token_types", "type_vocab_size 2"});
}

TEST(EncoderIo, DefaultsWithoutMaskOrTokenTypesAreAllRealAndSegmentZero) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  std::unique_ptr<Model> m =
      load_encoder_classifier(kEncoderFixtures + "bert_tiny", test::encoder_fixture_options(fx));
  Batch full = test::encoder_fixture_batch(fx);
  const int64_t B = full.inputs.size(0), T = full.inputs.size(1);
  full.attention_mask = Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(B * T), 1), {B, T});
  full.token_types = Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(B * T), 0), {B, T});
  Batch bare;
  bare.inputs = full.inputs;
  EXPECT_EQ(m->forward_batch(bare, false, 0).logits.value().to_floats(),
            m->forward_batch(full, false, 0).logits.value().to_floats());
  EXPECT_FALSE(m->forward_batch(bare, false, 0).loss.defined()) << "no targets, no loss";
}

// A config.json that describes a model far larger than its weights file is refused before the
// parameters are allocated (a hostile config cannot ask for terabytes).
TEST(EncoderIo, ConfigLargerThanTheWeightsFileIsRefusedBeforeAllocating) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  const fs::path d = fs::path(MIXTRAIN_BINARY_DIR) / "encoder_io_errors" / "huge";
  fs::remove_all(d);
  fs::create_directories(d);
  nlohmann::json j = nlohmann::json::parse(read_text(kEncoderFixtures + "bert_tiny/config.json"));
  j["vocab_size"] = int64_t{1} << 30;
  j["hidden_size"] = int64_t{1} << 20;
  j["num_attention_heads"] = 1;
  std::ofstream(d / "config.json") << j.dump();
  fs::copy_file(kEncoderFixtures + "bert_tiny/model.safetensors", d / "model.safetensors");
  const int64_t before = MemoryTracker::global().snapshot().peak_total;
  expect_error<IoError>([&] { load_encoder_classifier(d.string(), test::encoder_fixture_options(fx)); },
                        {"config.json", "holds only"});
  EXPECT_LT(MemoryTracker::global().snapshot().peak_total - before, int64_t{1} << 30);
}

// What a saved classifier says about itself: its labels and pooling come back from config.json, and
// encoder_info describes a loaded model.
TEST(EncoderIo, SavedOptionsAndInfoDescribeTheClassifier) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  ClassifierOptions o = test::encoder_fixture_options(fx, Pooling::mean);
  std::unique_ptr<Model> m = load_encoder_classifier(kEncoderFixtures + "bert_tiny", o);
  const fs::path dir = fs::path(MIXTRAIN_BINARY_DIR) / "encoder_io_errors" / "saved_mean";
  fs::remove_all(dir);
  save_encoder_classifier(*m, dir.string(), "");
  const ClassifierOptions back = saved_classifier_options(dir.string());
  EXPECT_EQ(back.labels, o.labels);
  EXPECT_EQ(back.pooling, Pooling::mean);
  EXPECT_TRUE(saved_classifier_options(builtin_data_path(kDefaultEncoderModel)).labels.empty())
      << "a bare encoder";

  const EncoderInfo info = encoder_info(*load_encoder_classifier(dir.string(), back));
  EXPECT_EQ(info.family, "bert");
  EXPECT_EQ(info.vocab_size, 99);
  EXPECT_EQ(info.max_positions, 24);
  EXPECT_EQ(info.hidden, 32);
  EXPECT_EQ(info.layers, 2);
  EXPECT_EQ(info.heads, 4);
  EXPECT_EQ(info.labels, o.labels);
  EXPECT_EQ(info.pooling, Pooling::mean);

  nlohmann::json j = nlohmann::json::parse(read_text(dir / "config.json"));
  j["id2label"] = {{"0", "a"}, {"2", "b"}};
  std::ofstream(dir / "config.json") << j.dump();
  expect_error<IoError>([&] { saved_classifier_options(dir.string()); }, {"config.json", "id2label", "'2'"});
}
