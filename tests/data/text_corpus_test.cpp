// TextCorpus on small files written to a temporary directory: split sizes, seeded training
// windows (determinism, ranges, shifted targets), the fixed validation windows, the unigram
// baseline, the built-in corpus lookup and every error case.
#include "mixtrain/data/text_corpus.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TextCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mixtrain_corpus_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  // n bytes with byte i = (i * 7 + i / 251) mod 256: every value appears, few repeats nearby.
  static std::string pattern(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = char((i * 7 + i / 251) % 256);
    return s;
  }
  fs::path dir_;
};

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST_F(TextCorpusTest, SplitSizes) {
  const TextCorpus c = TextCorpus::load(write("a.txt", pattern(1000)));
  EXPECT_EQ(c.size(), 1000);
  EXPECT_EQ(c.train_size(), 900);
  EXPECT_EQ(c.val_size(), 100);
  EXPECT_EQ(c.val_bytes() - c.train_bytes(), 900);
  const TextCorpus d = TextCorpus::load(write("b.txt", pattern(12345)), 0.2);
  EXPECT_EQ(d.val_size(), 2469);  // llround(2469.0)
  EXPECT_EQ(d.train_size() + d.val_size(), 12345);
  // Bytes come back exactly (including 0x00 and 0xff).
  const std::string p = pattern(1000);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(c.train_bytes()[i], uint8_t(p[size_t(i)])) << i;
}

TEST_F(TextCorpusTest, TrainBatchDeterministicAndShifted) {
  const TextCorpus c = TextCorpus::load(write("a.txt", pattern(5000)));
  const int64_t B = 4, T = 16;
  Tensor x1, y1, x2, y2;
  c.train_batch(B, T, 1234, 7, x1, y1);
  EXPECT_EQ(x1.shape(), (Shape{B, T}));
  EXPECT_EQ(x1.dtype(), DType::i32);
  EXPECT_EQ(y1.category(), MemCategory::data);
  c.train_batch(B, T, 1234, 7, x2, y2);  // same seed and step: same batch
  EXPECT_EQ(x1.to_ints(), x2.to_ints());
  EXPECT_EQ(y1.to_ints(), y2.to_ints());
  c.train_batch(B, T, 1234, 8, x2, y2);  // next step: different (reuses the tensors)
  EXPECT_NE(x1.to_ints(), x2.to_ints());
  c.train_batch(B, T, 99, 7, x2, y2);  // other seed: different
  EXPECT_NE(x1.to_ints(), x2.to_ints());

  // Row b depends on (seed, step, b) only: not on B.
  Tensor x8, y8;
  c.train_batch(8, T, 1234, 7, x8, y8);
  const std::vector<int32_t> a = x1.to_ints(), b8 = x8.to_ints();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b8.begin()));

  // targets = idx shifted by one, and both are the bytes of the window at train_window_start.
  const std::vector<int32_t> xi = x1.to_ints(), yi = y1.to_ints();
  for (int64_t r = 0; r < B; ++r) {
    const int64_t s = c.train_window_start(T, 1234, 7, r);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(xi[size_t(r * T + t)], c.train_bytes()[s + t]);
      EXPECT_EQ(yi[size_t(r * T + t)], c.train_bytes()[s + t + 1]);
      if (t + 1 < T) {
        EXPECT_EQ(yi[size_t(r * T + t)], xi[size_t(r * T + t + 1)]);
      }
    }
  }
}

TEST_F(TextCorpusTest, TrainWindowsStayInTrainPartAndCoverIt) {
  const TextCorpus c = TextCorpus::load(write("a.txt", pattern(300)));  // train 270 bytes
  const int64_t T = 8;
  std::set<int64_t> starts;
  for (int64_t step = 0; step < 2000; ++step)
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t s = c.train_window_start(T, 5, step, b);
      ASSERT_GE(s, 0);
      ASSERT_LE(s + T, c.train_size() - 1);  // the target of the last position is a train byte
      starts.insert(s);
    }
  EXPECT_EQ(int64_t(starts.size()), c.train_size() - T);  // every start is reachable
}

TEST_F(TextCorpusTest, ValWindowsFixedAndInsideValPart) {
  const TextCorpus c = TextCorpus::load(write("a.txt", pattern(2000)));  // val 200 bytes
  const int64_t T = 16, B = 5;
  EXPECT_EQ(c.num_val_windows(T), (200 - 1) / 16);  // 12
  EXPECT_EQ(c.num_val_batches(B, T), 3);
  Tensor x, y;
  int64_t seen = 0;
  for (int64_t bi = 0; bi < c.num_val_batches(B, T); ++bi) {
    const int64_t rows = c.val_batch(bi, B, T, x, y);
    EXPECT_EQ(rows, bi < 2 ? 5 : 2);
    const std::vector<int32_t> xi = x.to_ints(), yi = y.to_ints();
    for (int64_t r = 0; r < B; ++r) {
      const int64_t k = bi * B + r;
      for (int64_t t = 0; t < T; ++t) {
        if (r >= rows) {  // padding rows: ignored by cross_entropy
          EXPECT_EQ(yi[size_t(r * T + t)], -1);
          continue;
        }
        EXPECT_EQ(xi[size_t(r * T + t)], c.val_bytes()[k * T + t]);
        EXPECT_EQ(yi[size_t(r * T + t)], c.val_bytes()[k * T + t + 1]);
        ASSERT_LT(k * T + t + 1, c.val_size());
      }
    }
    seen += rows;
    Tensor x2, y2;  // the same batch again: identical
    c.val_batch(bi, B, T, x2, y2);
    EXPECT_EQ(x2.to_ints(), xi);
    EXPECT_EQ(y2.to_ints(), yi);
  }
  EXPECT_EQ(seen, c.num_val_windows(T));
  EXPECT_THROW(c.val_batch(3, B, T, x, y), ArgumentError);
  EXPECT_THROW(c.val_batch(-1, B, T, x, y), ArgumentError);
}

TEST_F(TextCorpusTest, UnigramEntropyOfKnownDistribution) {
  // Train: 450 'a' + 450 'b'; validation: 100 bytes, 75 'a' + 25 'b'.
  const std::string train = std::string(450, 'a') + std::string(450, 'b');
  const std::string val = std::string(75, 'a') + std::string(25, 'b');
  const TextCorpus c = TextCorpus::load(write("u.txt", train + val));
  ASSERT_EQ(c.val_size(), 100);
  const double p = 451.0 / (900.0 + 256.0);  // add-one smoothing over 256 byte values
  EXPECT_NEAR(c.unigram_entropy(), -std::log(p), 1e-12);
  // A uniform train part: every byte has p = 1/256 (counts equal), entropy ln 256.
  std::string uni;
  for (int r = 0; r < 10; ++r)
    for (int v = 0; v < 256; ++v) uni.push_back(char(v));
  const TextCorpus d = TextCorpus::from_bytes(std::vector<uint8_t>(uni.begin(), uni.end()), "uniform", 0.1);
  EXPECT_NEAR(d.unigram_entropy(), std::log(256.0), 1e-12);
}

TEST_F(TextCorpusTest, ErrorCases) {
  const std::string missing = (dir_ / "nope.txt").string();
  std::string msg = message_of<IoError>([&] { TextCorpus::load(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;

  const std::string empty = write("empty.txt", "");
  msg = message_of<IoError>([&] { TextCorpus::load(empty); });
  EXPECT_NE(msg.find(empty), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  msg = message_of<IoError>([&] { TextCorpus::load(dir_.string()); });
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;

  const TextCorpus small = TextCorpus::load(write("small.txt", pattern(100)));  // val 10 bytes
  msg = message_of<ArgumentError>([&] { small.check_window(16); });
  EXPECT_NE(msg.find("validation part has 10 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("T+1=17"), std::string::npos) << msg;
  EXPECT_NE(msg.find("small.txt"), std::string::npos) << msg;
  EXPECT_NO_THROW(small.check_window(9));
  Tensor x, y;
  EXPECT_THROW(small.train_batch(2, 16, 1, 0, x, y), ArgumentError);
  EXPECT_THROW(small.num_val_windows(16), ArgumentError);
  EXPECT_THROW(small.check_window(0), ArgumentError);
  EXPECT_THROW(TextCorpus::load(write("v.txt", "abc"), 0.0), ArgumentError);
  EXPECT_THROW(TextCorpus::load(write("w.txt", "abc"), 1.0), ArgumentError);

  // Wrong batch tensors.
  Tensor wrong = Tensor::zeros({2, 3}, DType::i32);
  Tensor ok;
  EXPECT_THROW(small.train_batch(2, 4, 1, 0, wrong, ok), ShapeError);
  Tensor f = Tensor::zeros({2, 4}, DType::f32);
  EXPECT_THROW(small.train_batch(2, 4, 1, 0, f, ok), DTypeError);
  EXPECT_THROW(small.train_batch(2, 4, 1, -1, x, y), ArgumentError);
}

TEST_F(TextCorpusTest, UnreadableFile) {
  const std::string p = write("secret.txt", "hello world");
  fs::permissions(p, fs::perms::none);
  if (std::ifstream(p).good()) GTEST_SKIP() << "running with permission to read anything (root)";
  const std::string msg = message_of<IoError>([&] { TextCorpus::load(p); });
  EXPECT_NE(msg.find("cannot be read"), std::string::npos) << msg;
}

TEST_F(TextCorpusTest, DefaultCorpusPath) {
  const char* old = std::getenv("MIXTRAIN_DATA_DIR");
  const std::string saved = old ? old : "";
  setenv("MIXTRAIN_DATA_DIR", dir_.c_str(), 1);
  std::string msg = message_of<IoError>([] { TextCorpus::default_corpus_path(); });
  EXPECT_NE(msg.find("make_corpus.sh"), std::string::npos) << msg;
  const std::string p = write("fortunes.txt", pattern(500));
  EXPECT_EQ(TextCorpus::default_corpus_path(), p);
  if (old)
    setenv("MIXTRAIN_DATA_DIR", saved.c_str(), 1);
  else
    unsetenv("MIXTRAIN_DATA_DIR");
}

// The build makes the corpus (CMake target `corpus`) and ctest points MIXTRAIN_DATA_DIR at it,
// so a missing corpus fails here.
TEST(TextCorpusBuiltIn, IsBuiltAndLoads) {
  const std::string path = TextCorpus::default_corpus_path();
  const TextCorpus c = TextCorpus::load(path);
  EXPECT_GT(c.size(), 1'000'000);
  const double h = c.unigram_entropy();
  EXPECT_GT(h, 2.0);  // English text: about 3.0 nats per byte under unigram frequencies
  EXPECT_LT(h, 4.0);
}

}  // namespace
}  // namespace mixtrain
