// A training corpus of byte-level tokens (vocabulary 256: token = byte value), so any file of
// bytes trains without a tokenizer; or of a tokenizer's ids, from a token file (data/token_file.h,
// memory-mapped). A byte file is read whole; its first part trains and its last part validates. Training
// batches are random windows whose starts depend only on (seed, step, row), so a resumed run sees exactly the
// batches it would have seen; validation uses one fixed set of windows, so every run is evaluated on the same
// bytes.
//
// Dimension letters: B batch rows, T tokens per row (the context length).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

class TextCorpus {
 public:
  static constexpr int64_t kVocabSize = 256;

  // Reads the whole file. The validation part is the last llround(size * val_fraction) bytes,
  // the train part the rest. Throws IoError (one line naming the path and the reason) when the
  // file is missing, a directory, unreadable or empty; ArgumentError unless 0 < val_fraction < 1.
  static TextCorpus load(const std::string& path, double val_fraction = 0.1);
  // The same from bytes in memory (tests, tools); `name` stands for the path in messages.
  static TextCorpus from_bytes(std::vector<uint8_t> bytes, const std::string& name,
                               double val_fraction = 0.1);

  // A token file (data/token_file.h), memory-mapped, its train and validation parts as written.
  // IoError naming the file for a bad header, a size that disagrees with it, a checksum mismatch
  // or an id not below its vocabulary size (every id is checked once here).
  static TextCorpus from_token_file(const std::string& path);

  // The built-in corpus: $MIXTRAIN_DATA_DIR/fortunes.txt when MIXTRAIN_DATA_DIR is set (and only
  // there); else the first that exists of <directory of the executable>/data/fortunes.txt and
  // ./build/data/fortunes.txt. Throws IoError naming where it looked and saying to run
  // scripts/setup.sh and scripts/make_corpus.sh when none exists.
  static std::string default_corpus_path();

  const std::string& path() const { return path_; }
  // Sizes in tokens (bytes for a byte corpus).
  int64_t size() const { return size_; }
  int64_t train_size() const { return train_size_; }
  int64_t val_size() const { return size() - train_size_; }
  // The ids: 256 for bytes, else the tokenizer's vocabulary size; every token is below it.
  int64_t vocab_size() const { return vocab_size_; }
  // Token k of the whole corpus (train part first), k in [0, size()).
  int32_t token(int64_t k) const {
    switch (width_) {
      case 1:
        return raw_[k];
      case 2:
        return int32_t(uint32_t(raw_[2 * k]) | uint32_t(raw_[2 * k + 1]) << 8);
      default: {
        const uint8_t* p = raw_ + 4 * k;
        return int32_t(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
      }
    }
  }
  // The stored tokens, width() bytes each (little-endian): what identifies the data of a run.
  const uint8_t* storage() const { return raw_; }
  int64_t storage_bytes() const { return size_ * width_; }
  int width() const { return width_; }
  // A byte corpus: its bytes (train part, validation part). Not for a token corpus (nullptr).
  const uint8_t* train_bytes() const { return width_ == 1 && !mapping_ ? raw_ : nullptr; }
  const uint8_t* val_bytes() const { return width_ == 1 && !mapping_ ? raw_ + train_size_ : nullptr; }
  // The text the validation tokens stand for, in bytes (val_size() for a byte corpus), and the
  // tokenizer's fingerprint ("" for bytes).
  int64_t val_text_bytes() const { return val_text_bytes_; }
  const std::string& tokenizer() const { return tokenizer_; }

  // Throws ArgumentError unless T >= 1 and both parts hold at least one window of T+1 tokens:
  // "data file X: validation part has N bytes, fewer than one window of T+1=... tokens".
  void check_window(int64_t T) const;

  // A training batch for optimizer step `step` (>= 0): row b is the window of T+1 train bytes
  // starting at s = r mod (train_size - T), r = 64 random bits from counter_rng(seed, c) and
  // counter_rng(seed, c + 1) with c = 2 * (step * 2^20 + b). So a row depends only on
  // (seed, step, b): not on B, the thread count or anything drawn before. B <= 2^20.
  //   idx     (B, T) i32: bytes s .. s+T-1
  //   targets (B, T) i32: bytes s+1 .. s+T (idx shifted by one)
  // An undefined idx / targets is allocated (MemCategory::data); a defined one must be a
  // contiguous (B, T) i32 tensor (ShapeError / DTypeError).
  void train_batch(int64_t B, int64_t T, uint64_t seed, int64_t step, Tensor& idx, Tensor& targets) const;
  // The start (in the train part) of row b at `step`: what train_batch uses.
  int64_t train_window_start(int64_t T, uint64_t seed, int64_t step, int64_t b) const;

  // The fixed evaluation windows: window k covers validation bytes k*T .. k*T+T (inputs
  // k*T .. k*T+T-1, targets one further). Inputs of different windows do not overlap and neither
  // do targets: together the windows predict validation bytes 1 .. num*T exactly once.
  // num_val_windows(T) = (val_size - 1) / T.
  int64_t num_val_windows(int64_t T) const;
  // ceil(num_val_windows(T) / B).
  int64_t num_val_batches(int64_t B, int64_t T) const;
  // Batch `batch_index` in [0, num_val_batches): row b holds window batch_index*B + b. Rows past
  // the last window (only in the last batch) get idx 0 and targets -1, which cross_entropy
  // ignores. Returns the number of real rows. idx / targets as in train_batch.
  int64_t val_batch(int64_t batch_index, int64_t B, int64_t T, Tensor& idx, Tensor& targets) const;

  // The cross-entropy in nats of the validation tokens under the train part's token frequencies
  // with add-one smoothing, p(c) = (count(c) + 1) / (train_size + V): the loss of the best
  // context-free model, which a trained model must beat.
  double unigram_entropy() const;

 private:
  TextCorpus() = default;
  void prepare_batch(int64_t B, int64_t T, Tensor& idx, Tensor& targets, const char* op) const;

  std::string path_;
  std::vector<uint8_t> bytes_;           // a byte corpus: the whole file
  std::shared_ptr<const void> mapping_;  // a token corpus: the mapped file (unmapped at the end)
  const uint8_t* raw_ = nullptr;         // token 0's first byte
  int width_ = 1;                        // bytes per token
  int64_t size_ = 0;                     // tokens
  int64_t train_size_ = 0;               // tokens [0, train_size_) train, the rest validate
  int64_t vocab_size_ = kVocabSize;
  int64_t val_text_bytes_ = 0;
  std::string tokenizer_;
};

}  // namespace mixtrain
