// Labelled text as a DataSource (data/data_source.h) for fine-tuning a sequence classifier: the
// training and test sets tokenized once with a WordPiece tokenizer ([CLS] a [SEP] (b [SEP]),
// truncated to max_len), then batched with dynamic padding (each batch as long as its longest
// row), the way Hugging Face's Trainer batches with DataCollatorWithPadding.
//
// Training: epochs over the training set, each in its own seeded order (a Fisher-Yates shuffle
// driven by counter_rng(seed ^ epoch hash, i)); an epoch is ceil(N / B) batches, the last one
// short (N mod B rows) as a DataLoader without drop_last gives it. Batch `position` (from 1)
// belongs to epoch (position - 1) / batches_per_epoch(), so it is a function of (seed, position)
// only and a resumed run reads the batches an uninterrupted one would.
// Evaluation: the test set in file order, every example exactly once; the last batch is filled up
// to B with padding rows (target -1, inputs [CLS] [SEP]) and says how many rows are real.
//
//   inputs, token_types, attention_mask  (B, T) i32, T = the batch's longest row (<= max_len)
//   targets                              (B) i32 class ids, -1 for a padding row
//   real_tokens                          tokens that are not [PAD] (tokens/s counts these)
// On the meta device (memory prediction) the tensors get their real shapes and no values.
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/data/data_source.h"
#include "mixtrain/data/text_classification.h"
#include "mixtrain/data/wordpiece.h"

namespace mixtrain {

class ClassificationBatches final : public DataSource {
 public:
  // Both sets must use the same label list (test loaded with train's labels). ArgumentError
  // unless batch_size >= 1, max_len >= 3 (2 for single texts) and the training set is not empty.
  // The tokenizer is only used here: the encodings are kept, the sets and tokenizer need not
  // outlive this.
  ClassificationBatches(const TextClassificationData& train, const TextClassificationData& test,
                        const WordPieceTokenizer& tokenizer, int64_t batch_size, int64_t max_len,
                        uint64_t seed);

  void train_batch(int64_t position, Batch& out) const override;
  int64_t num_eval_batches() const override;
  void eval_batch(int64_t index, Batch& out) const override;
  int64_t batch_size() const override { return B_; }
  // max_len: the longest a batch can be (a batch is as long as its longest row).
  int64_t sequence_length() const override { return max_len_; }
  // The entropy (nats) of the test set's class frequencies: the loss of always answering them.
  double baseline_loss() const override { return prior_entropy_; }

  int64_t batches_per_epoch() const { return (int64_t(train_.size()) + B_ - 1) / B_; }
  int64_t num_classes() const { return num_classes_; }
  double majority_baseline() const { return majority_; }  // the test set's majority-class accuracy
  // The training examples of epoch `epoch` (from 0) in the order they are batched.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // The encodings (ids with [CLS]/[SEP], type ids) in file order.
  const std::vector<Encoding>& train_encodings() const { return train_; }
  const std::vector<Encoding>& test_encodings() const { return test_; }

 private:
  // Fills `out` with the encodings `rows` of `set` (-1: a padding row), targets from `labels`.
  void fill(const std::vector<Encoding>& set, const std::vector<int32_t>& labels,
            const std::vector<int64_t>& rows, Batch& out) const;

  std::vector<Encoding> train_, test_;
  std::vector<int32_t> train_labels_, test_labels_;
  int64_t B_, max_len_;
  uint64_t seed_;
  int32_t pad_id_, cls_id_, sep_id_;
  int64_t num_classes_;
  double prior_entropy_ = 0, majority_ = 0;
};

}  // namespace mixtrain
