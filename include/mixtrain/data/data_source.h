// Where a training run gets its batches: the interface the engine (train/training_run.h) reads,
// and LmWindows, the language-model windows of a TextCorpus. A classification data set
// (labelled sequences) implements the same interface.
#pragma once
#include <cstdint>
#include <string>

#include "mixtrain/data/text_corpus.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// One batch. For language modelling: inputs and targets (B, T) i32 (targets -1 are ignored by the
// loss). Tensors are reused from call to call when their shape fits.
// For sequence classification: inputs (B, T) i32 padded to the batch's longest row, targets (B)
// i32 class ids (-1 for a padding row), token_types and attention_mask (B, T) i32.
struct Batch {
  Tensor inputs;            // (B, T) i32 token ids
  Tensor targets;           // (B, T) i32 next tokens; classification: (B) i32 class ids
  Tensor token_types;       // (B, T) i32 segment ids (0 / 1); undefined: all 0
  Tensor attention_mask;    // (B, T) i32, 1 on real tokens, 0 on padding; undefined: all real
  int64_t rows = 0;         // rows that hold real data (an evaluation batch may be padded)
  int64_t real_tokens = 0;  // tokens that are not padding (tokens/s counts these); 0: B * T
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // The training batch at stream position `position` (from 1): a function of the seed and the
  // position only, so a resumed run reads the batches an uninterrupted one would.
  virtual void train_batch(int64_t position, Batch& out) const = 0;
  // The fixed evaluation batches, [0, num_eval_batches()).
  virtual int64_t num_eval_batches() const = 0;
  virtual void eval_batch(int64_t index, Batch& out) const = 0;
  virtual int64_t batch_size() const = 0;       // B
  virtual int64_t sequence_length() const = 0;  // T
  // The loss of a model that ignores the context (the unigram entropy for text): a trained model
  // must beat it.
  virtual double baseline_loss() const = 0;
  // Text: the bytes of text an evaluation token stands for on average (1 for bytes; a tokenizer's
  // validation text bytes / its tokens), so a loss per token converts to bits per byte. 0: not text.
  virtual double eval_bytes_per_token() const { return 0.0; }
};

// Random training windows and fixed validation windows of a byte-level text corpus
// (TextCorpus::train_batch / val_batch). The corpus must outlive it.
class LmWindows final : public DataSource {
 public:
  // ArgumentError unless batch_size >= 1 and the corpus holds windows of seq_len + 1 bytes.
  LmWindows(const TextCorpus& corpus, int64_t batch_size, int64_t seq_len, uint64_t seed);
  void train_batch(int64_t position, Batch& out) const override;
  int64_t num_eval_batches() const override;
  void eval_batch(int64_t index, Batch& out) const override;
  int64_t batch_size() const override { return B_; }
  int64_t sequence_length() const override { return T_; }
  double baseline_loss() const override { return corpus_.unigram_entropy(); }
  double eval_bytes_per_token() const override {
    return double(corpus_.val_text_bytes()) / double(corpus_.val_size());
  }
  const TextCorpus& corpus() const { return corpus_; }

 private:
  const TextCorpus& corpus_;
  int64_t B_, T_;
  uint64_t seed_;
};

}  // namespace mixtrain
