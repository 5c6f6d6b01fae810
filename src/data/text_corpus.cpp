// TextCorpus: byte-level corpus loading, seeded training windows, fixed validation windows and
// the unigram baseline (see text_corpus.h).
#include "mixtrain/data/text_corpus.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "mixtrain/numeric/stochastic.h"
#include "tensor/alloc_site.h"

namespace mixtrain {

namespace fs = std::filesystem;

namespace {
constexpr int64_t kMaxRows = int64_t(1) << 20;  // rows per step in the RNG counter
constexpr int64_t kMaxStep = int64_t(1) << 41;  // keeps 2 * (step * 2^20 + b) + 1 below 2^63

std::string quoted(const std::string& path) { return "'" + path + "'"; }
}  // namespace

TextCorpus TextCorpus::from_bytes(std::vector<uint8_t> bytes, const std::string& name, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw ArgumentError("data file " + quoted(name) + ": val_fraction must be in (0, 1), got " +
                        std::to_string(val_fraction));
  if (bytes.empty()) throw IoError("data file " + quoted(name) + ": the file is empty");
  TextCorpus c;
  c.path_ = name;
  const int64_t n = int64_t(bytes.size());
  const int64_t n_val = std::llround(double(n) * val_fraction);
  c.train_size_ = n - n_val;
  c.bytes_ = std::move(bytes);
  c.raw_ = c.bytes_.data();
  c.size_ = n;
  c.val_text_bytes_ = n_val;
  return c;
}

TextCorpus TextCorpus::load(const std::string& path, double val_fraction) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) throw IoError("data file " + quoted(path) + ": no such file");
  if (st.type() == fs::file_type::directory)
    throw IoError("data file " + quoted(path) + ": is a directory, not a file");
  if (ec) throw IoError("data file " + quoted(path) + ": cannot be read (" + ec.message() + ")");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw IoError("data file " + quoted(path) + ": cannot be read (" + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes;
  std::array<uint8_t, 1 << 16> chunk;
  for (;;) {
    const size_t got = std::fread(chunk.data(), 1, chunk.size(), f.get());
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
    if (got < chunk.size()) break;
  }
  if (std::ferror(f.get()))
    throw IoError("data file " + quoted(path) + ": read error (" + std::strerror(errno) + ")");
  return from_bytes(std::move(bytes), path, val_fraction);
}

std::string TextCorpus::default_corpus_path() {
  const char* kFile = "fortunes.txt";
  const std::string hint = "; run scripts/setup.sh, then scripts/make_corpus.sh build/data/fortunes.txt";
  if (const char* dir = std::getenv("MIXTRAIN_DATA_DIR"); dir && *dir) {
    const std::string p = (fs::path(dir) / kFile).string();
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
    throw IoError("built-in corpus " + quoted(p) + " (from MIXTRAIN_DATA_DIR) not found" + hint);
  }
  std::vector<std::string> tried;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    tried.push_back((exe.parent_path() / "data" / kFile).string());                              // build/
    tried.push_back((exe.parent_path().parent_path() / "share" / "mixtrain" / kFile).string());  // installed
  }
  tried.push_back((fs::path("build") / "data" / kFile).string());
  for (const std::string& p : tried) {
    std::error_code ec2;
    if (fs::is_regular_file(p, ec2)) return p;
  }
  std::string where;
  for (const std::string& p : tried) where += (where.empty() ? "" : ", ") + quoted(p);
  throw IoError("built-in corpus not found (looked in " + where + ")" + hint);
}

void TextCorpus::check_window(int64_t T) const {
  if (T < 1)
    throw ArgumentError("data file " + quoted(path_) + ": window length T must be >= 1, got " +
                        std::to_string(T));
  const auto check = [&](const char* part, int64_t n) {
    if (n < T + 1)
      throw ArgumentError("data file " + quoted(path_) + ": " + part + " part has " + std::to_string(n) +
                          (mapping_ ? " tokens" : " bytes") +
                          ", fewer than one window of T+1=" + std::to_string(T + 1) + " tokens");
  };
  check("train", train_size());
  check("validation", val_size());
}

void TextCorpus::prepare_batch(int64_t B, int64_t T, Tensor& idx, Tensor& targets, const char* op) const {
  if (B < 1 || B > kMaxRows)
    throw ArgumentError(std::string(op) + ": batch size B must be in [1, 2^20], got " + std::to_string(B));
  check_window(T);
  const ScopedOp site("batch");  // names the token tensors in memory reports
  for (Tensor* t : {&idx, &targets}) {
    if (!t->defined()) {
      *t = Tensor::empty({B, T}, DType::i32, MemCategory::data);
      continue;
    }
    if (t->dtype() != DType::i32)
      throw DTypeError(std::string(op) + ": batch tensors must be i32, got " + t->to_string());
    if (t->shape() != Shape{B, T} || !t->is_contiguous())
      throw ShapeError(std::string(op) + ": batch tensors must be contiguous (" + std::to_string(B) + ", " +
                       std::to_string(T) + "), got " + t->to_string());
  }
}

int64_t TextCorpus::train_window_start(int64_t T, uint64_t seed, int64_t step, int64_t b) const {
  if (step < 0 || step >= kMaxStep)
    throw ArgumentError("TextCorpus::train_batch: step must be in [0, 2^41), got " + std::to_string(step));
  const uint64_t c = 2 * (uint64_t(step) * uint64_t(kMaxRows) + uint64_t(b));
  const uint64_t r = (uint64_t(counter_rng(seed, c)) << 32) | counter_rng(seed, c + 1);
  return int64_t(r % uint64_t(train_size_ - T));  // starts 0 .. train_size-T-1: the window fits
}

void TextCorpus::train_batch(int64_t B, int64_t T, uint64_t seed, int64_t step, Tensor& idx,
                             Tensor& targets) const {
  prepare_batch(B, T, idx, targets, "TextCorpus::train_batch");
  if (idx.is_meta()) return;             // a meta batch has a shape and no tokens
  int32_t* x = idx.data<int32_t>();      // (B, T)
  int32_t* y = targets.data<int32_t>();  // (B, T)
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = train_window_start(T, seed, step, b);
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = token(w + t);
      y[b * T + t] = token(w + t + 1);
    }
  }
}

int64_t TextCorpus::num_val_windows(int64_t T) const {
  check_window(T);
  return (val_size() - 1) / T;
}

int64_t TextCorpus::num_val_batches(int64_t B, int64_t T) const {
  if (B < 1)
    throw ArgumentError("TextCorpus::num_val_batches: batch size B must be >= 1, got " + std::to_string(B));
  return (num_val_windows(T) + B - 1) / B;
}

int64_t TextCorpus::val_batch(int64_t batch_index, int64_t B, int64_t T, Tensor& idx, Tensor& targets) const {
  prepare_batch(B, T, idx, targets, "TextCorpus::val_batch");
  const int64_t windows = num_val_windows(T);
  const int64_t batches = (windows + B - 1) / B;
  if (batch_index < 0 || batch_index >= batches)
    throw ArgumentError("TextCorpus::val_batch: batch index " + std::to_string(batch_index) +
                        " out of range [0, " + std::to_string(batches) + ")");
  if (idx.is_meta()) return std::min(B, windows - batch_index * B);  // rows a real batch would fill
  int32_t* x = idx.data<int32_t>();                                  // (B, T)
  int32_t* y = targets.data<int32_t>();                              // (B, T)
  int64_t rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = batch_index * B + b;
    if (k >= windows) {
      for (int64_t t = 0; t < T; ++t) x[b * T + t] = 0, y[b * T + t] = -1;
      continue;
    }
    const int64_t w = train_size_ + k * T;
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = token(w + t);
      y[b * T + t] = token(w + t + 1);
    }
    ++rows;
  }
  return rows;
}

double TextCorpus::unigram_entropy() const {
  std::vector<int64_t> count(static_cast<size_t>(vocab_size_), 0);
  for (int64_t i = 0; i < train_size_; ++i) ++count[size_t(token(i))];
  const double denom = double(train_size_ + vocab_size_);
  std::vector<double> neg_log_p(static_cast<size_t>(vocab_size_));
  for (int64_t c = 0; c < vocab_size_; ++c)
    neg_log_p[size_t(c)] = -std::log(double(count[size_t(c)] + 1) / denom);
  if (val_size() == 0) return 0.0;
  double sum = 0.0;
  for (int64_t i = train_size_; i < size_; ++i) sum += neg_log_p[size_t(token(i))];
  return sum / double(val_size());
}

}  // namespace mixtrain
