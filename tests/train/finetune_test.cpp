// finetune() on a tiny random BERT (the encoder fixture's bert_tiny with a generated vocabulary)
// and a small labelled set: tokens/s counts the batches' real tokens (not B * T), the evaluation
// covers the whole test set once (the saved model classifies the test set to the same accuracy),
// the epochs and the linear schedule line up, the memory prediction on the meta device equals the
// measured peaks to the byte in every precision mode, and bad options are refused.
#include "mixtrain/train/finetune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "mixtrain/core/error.h"
#include "mixtrain/data/classification_batches.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/train/classify.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kWords = {"bad", "meh", "good", "good"};
const std::vector<std::string> kLabels = {"negative", "neutral", "positive", "positive"};

// bert_tiny (vocab 99, 24 positions, 3 labels) with a vocab.txt, and train / test TSVs whose label
// is the sentiment word of the text. Made once per process, in a folder of its own (ctest runs
// the tests of this file as parallel processes), removed at exit.
struct Fixture {
  std::string dir = (fs::path(testing::TempDir()) / ("finetune_test." + std::to_string(::getpid()))).string();
  std::string model = dir + "/model", train = dir + "/train.tsv", test = dir + "/test.tsv";
  Fixture() {
    fs::create_directories(model);
    const fs::path src = fs::path(MIXTRAIN_SOURCE_DIR) / "tests/fixtures/encoder/bert_tiny";
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(src / f, fs::path(model) / f, fs::copy_options::overwrite_existing);
    std::ofstream v(model + "/vocab.txt");
    for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "meh", "the", "food",
                          "was", "and", "it", "tasted"})
      v << t << "\n";
    for (int i = 1; i <= 85; ++i) v << "w" << i << "\n";
    write(train, 50, 0);
    write(test, 21, 1);  // 21: the last evaluation batch is short
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  static void write(const std::string& path, int rows, int offset) {
    std::ofstream f(path);
    f << "text\tlabel\n";
    for (int i = 1; i <= rows; ++i) {
      const size_t k = size_t((i + offset) % 4);
      f << "the food was " << kWords[k];
      for (int w = 0; w < i % 5; ++w) f << " w" << (i * 7 + w) % 85 + 1;  // lengths differ: padding
      f << "\t" << kLabels[k] << "\n";
    }
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

FinetuneOptions tiny(PrecisionMode mode = PrecisionMode::true32) {
  FinetuneOptions o;
  o.model_dir = fixture().model;
  o.train_path = fixture().train;
  o.test_path = fixture().test;
  o.max_len = 16;
  o.epochs = 2;
  o.pooling = Pooling::mean;
  o.train.batch_size = 8;
  o.train.lr = 1e-2f;
  o.train.precision = mode;
  o.train.quiet = true;
  return o;
}

TEST(Finetune, TokensPerSecondCountsRealTokensAndEpochsLineUp) {
  FinetuneOptions o = tiny();
  std::vector<StepRecord> steps;
  struct Collect final : TrainingHook {
    std::vector<StepRecord>& out;
    explicit Collect(std::vector<StepRecord>& o) : out(o) {}
    void on_step_end(TrainingRun&, const StepRecord& r) override { out.push_back(r); }
  };
  o.train.add_hooks = [&](TrainingRun& run) { run.add_hook(std::make_unique<Collect>(steps)); };
  const FinetuneSummary s = finetune(o);
  EXPECT_EQ(s.steps_per_epoch, 7);  // ceil(50 / 8)
  ASSERT_EQ(steps.size(), 14u);
  ASSERT_EQ(s.epochs.size(), 2u);
  EXPECT_EQ(s.epochs[0].step, 7);
  EXPECT_EQ(s.epochs[1].step, 14);
  EXPECT_DOUBLE_EQ(s.majority_baseline, 11.0 / 21.0);  // test: 11 positive, 5 negative, 5 neutral
  // The same batches, read again: each step's tokens are its batch's non-padding tokens.
  const TextClassificationData train = TextClassificationData::load(o.train_path, o.columns);
  const TextClassificationData test = TextClassificationData::load(o.test_path, o.columns, &train.labels);
  const ClassificationBatches data(
      train, test, WordPieceTokenizer::from_vocab_file(o.model_dir + "/vocab.txt"), 8, 16, o.train.seed);
  int64_t total = 0, padded = 0;
  for (const StepRecord& r : steps) {
    Batch b;
    data.train_batch(r.step, b);
    EXPECT_EQ(r.tokens, b.real_tokens) << "step " << r.step;
    total += b.real_tokens;
    padded += b.inputs.numel();
  }
  EXPECT_LT(total, padded);  // the rows differ in length: there is padding to leave out
  double seconds = 0;
  for (const StepRecord& r : steps) seconds += r.seconds;
  EXPECT_NEAR(s.run.tokens_per_s, double(total) / seconds, 1e-6 * s.run.tokens_per_s);
  EXPECT_DOUBLE_EQ(s.train_seconds, seconds);
  // Hugging Face's linear schedule over the 14 steps: the full rate first, lr / 14 at the last.
  EXPECT_FLOAT_EQ(steps.front().lr, 1e-2f);
  EXPECT_FLOAT_EQ(steps.back().lr, 1e-2f / 14);
}

TEST(Finetune, EvaluationCoversTheTestSetAndTheSavedModelAgrees) {
  FinetuneOptions o = tiny();
  o.epochs = 4;
  o.save_dir = fixture().dir + "/saved";
  fs::remove_all(o.save_dir);
  const FinetuneSummary s = finetune(o);
  EXPECT_GT(s.test_accuracy(), s.majority_baseline + 0.2);  // it learned the sentiment words
  // The saved model over the whole test set, one text at a time: the run's final accuracy.
  const TextClassifier c = TextClassifier::load(o.save_dir);
  EXPECT_EQ(c.labels(), (std::vector<std::string>{"negative", "neutral", "positive"}));
  const TextClassificationData test = TextClassificationData::load(o.test_path, o.columns, &c.labels());
  std::vector<std::string> texts;
  for (const TextExample& e : test.examples) texts.push_back(e.text);
  const std::vector<Prediction> p = c.classify(texts, o.max_len, 1);
  int correct = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    correct += p[i].label == c.labels()[size_t(test.examples[i].label)];
    EXPECT_NEAR(std::accumulate(p[i].probabilities.begin(), p[i].probabilities.end(), 0.0), 1.0, 1e-9);
  }
  EXPECT_DOUBLE_EQ(double(correct) / 21.0, s.test_accuracy());
}

TEST(Finetune, MemoryPredictionIsExactInEveryMode) {
  struct Run {
    PrecisionMode mode;
    UpdateRounding rounding;
  };
  for (const Run& r : {Run{PrecisionMode::true32, UpdateRounding::nearest},
                       Run{PrecisionMode::mixed16, UpdateRounding::nearest},
                       Run{PrecisionMode::mixed_bf16, UpdateRounding::nearest},
                       Run{PrecisionMode::true16, UpdateRounding::nearest},
                       Run{PrecisionMode::true_bf16, UpdateRounding::nearest},
                       Run{PrecisionMode::true_bf16, UpdateRounding::master}}) {
    FinetuneOptions o = tiny(r.mode);
    o.train.steps = 2;
    o.train.update_rounding = r.rounding;
    const MemoryPrediction p = predict_finetune_memory(o);
    // The run's own peaks (TrainSummary::memory: before the GEMM-rate measurement for the MFU).
    const MemorySnapshot measured = finetune(o).run.memory;
    const std::string mode =
        std::string(precision_spec(r.mode).name) + " " + std::string(update_rounding_name(r.rounding));
    EXPECT_EQ(p.peak_bytes, measured.peak_total) << mode;
    for (size_t c = 0; c < kNumMemCategories; ++c)
      EXPECT_EQ(p.peak_by_category[c], measured.peak[c]) << mode << " " << mem_category_name(MemCategory(c));
    EXPECT_GT(p.peak_bytes, 0) << mode;
  }
}

TEST(Finetune, BadOptionsAreRefused) {
  auto refused = [](auto edit) {
    FinetuneOptions o = tiny();
    edit(o);
    EXPECT_THROW(finetune(o), Error);
  };
  refused([](FinetuneOptions& o) { o.max_len = 1; });
  refused([](FinetuneOptions& o) { o.epochs = 0; });
  refused([](FinetuneOptions& o) { o.task = "imdb"; });
  refused([](FinetuneOptions& o) { o.test_path.clear(); });
  refused([](FinetuneOptions& o) { o.task = "fortunes"; });  // with train_path: one or the other
  refused([](FinetuneOptions& o) { o.columns.label = "score"; });
  refused([](FinetuneOptions& o) { o.model_dir += "/missing"; });
  refused([](FinetuneOptions& o) { o.train.checkpoint.init_from = "x.safetensors"; });
  refused([](FinetuneOptions& o) { o.max_len = 64; });  // past the model's 24 positions
}

}  // namespace
}  // namespace mixtrain
