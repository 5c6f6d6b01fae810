// ClassificationBatches: tokenized labelled text as training and evaluation batches
// (data/classification_batches.h).
#include "mixtrain/data/classification_batches.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/numeric/stochastic.h"
#include "tensor/alloc_site.h"

namespace mixtrain {
namespace {

std::vector<Encoding> encode_all(const TextClassificationData& d, const WordPieceTokenizer& tok,
                                 int64_t max_len) {
  // Sentence pairs when the set has a second text (an empty one is still a pair: [CLS] a [SEP] [SEP]).
  const bool pairs = std::any_of(d.examples.begin(), d.examples.end(),
                                 [](const TextExample& e) { return !e.text_pair.empty(); });
  std::vector<Encoding> out;
  out.reserve(d.examples.size());
  for (const TextExample& e : d.examples)
    out.push_back(pairs ? tok.encode_pair(e.text, e.text_pair, max_len) : tok.encode(e.text, max_len));
  return out;
}

std::vector<int32_t> labels_of(const TextClassificationData& d) {
  std::vector<int32_t> out;
  out.reserve(d.examples.size());
  for (const TextExample& e : d.examples) out.push_back(e.label);
  return out;
}

// A different stream per epoch from one seed (splitmix64's finaliser decorrelates neighbours).
uint64_t epoch_seed(uint64_t seed, int64_t epoch) {
  return seed ^ detail::splitmix64_mix(uint64_t(epoch) + 0x5eed5eedull);
}

}  // namespace

ClassificationBatches::ClassificationBatches(const TextClassificationData& train,
                                             const TextClassificationData& test,
                                             const WordPieceTokenizer& tokenizer, int64_t batch_size,
                                             int64_t max_len, uint64_t seed)
    : B_(batch_size),
      max_len_(max_len),
      seed_(seed),
      pad_id_(tokenizer.pad_id()),
      cls_id_(tokenizer.cls_id()),
      sep_id_(tokenizer.sep_id()),
      num_classes_(int64_t(train.labels.size())) {
  if (batch_size < 1 || batch_size > (int64_t{1} << 20))
    throw ArgumentError({"batch_size"}, "batch_size must be in [1, 2^20], got " + std::to_string(batch_size));
  const bool pairs = std::any_of(train.examples.begin(), train.examples.end(),
                                 [](const TextExample& e) { return !e.text_pair.empty(); });
  const int64_t min_len = pairs ? 3 : 2;  // room for the specials
  if (max_len < min_len)
    throw ArgumentError({"max_len"}, "max_len must be at least " + std::to_string(min_len) + ", got " +
                                         std::to_string(max_len));
  if (train.examples.empty()) throw ArgumentError("training set " + train.path + " holds no examples");
  if (test.labels != train.labels)
    throw ArgumentError("test set " + test.path + " must use the training set's label list");
  train_ = encode_all(train, tokenizer, max_len);
  test_ = encode_all(test, tokenizer, max_len);
  train_labels_ = labels_of(train);
  test_labels_ = labels_of(test);
  majority_ = test.majority_baseline();
  const std::vector<int64_t> counts = test.class_counts();
  for (int64_t c : counts)
    if (c > 0) {
      const double p = double(c) / double(test.examples.size());
      prior_entropy_ -= p * std::log(p);
    }
}

std::vector<int64_t> ClassificationBatches::epoch_order(int64_t epoch) const {
  if (epoch < 0)
    throw ArgumentError("ClassificationBatches: epoch must be >= 0, got " + std::to_string(epoch));
  const size_t n = train_.size();
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = int64_t(i);
  const uint64_t s = epoch_seed(seed_, epoch);
  for (size_t i = n; i > 1; --i) {  // Fisher-Yates: position i-1 takes one of [0, i)
    const uint64_t r =
        (uint64_t(counter_rng(s, 2 * uint64_t(i))) << 32) | counter_rng(s, 2 * uint64_t(i) + 1);
    std::swap(order[i - 1], order[size_t(r % uint64_t(i))]);
  }
  return order;
}

void ClassificationBatches::train_batch(int64_t position, Batch& out) const {
  if (position < 1)
    throw ArgumentError("ClassificationBatches::train_batch: position counts from 1, got " +
                        std::to_string(position));
  const int64_t per_epoch = batches_per_epoch();
  const int64_t epoch = (position - 1) / per_epoch;
  const int64_t first = ((position - 1) % per_epoch) * B_;
  const std::vector<int64_t> order = epoch_order(epoch);
  const int64_t end = std::min<int64_t>(first + B_, int64_t(order.size()));
  fill(train_, train_labels_, std::vector<int64_t>(order.begin() + first, order.begin() + end), out);
}

int64_t ClassificationBatches::num_eval_batches() const { return (int64_t(test_.size()) + B_ - 1) / B_; }

void ClassificationBatches::eval_batch(int64_t index, Batch& out) const {
  if (index < 0 || index >= num_eval_batches())
    throw ArgumentError("ClassificationBatches::eval_batch: index " + std::to_string(index) +
                        " out of range [0, " + std::to_string(num_eval_batches()) + ")");
  std::vector<int64_t> rows(size_t(B_), -1);
  for (int64_t b = 0; b < B_ && index * B_ + b < int64_t(test_.size()); ++b) rows[size_t(b)] = index * B_ + b;
  fill(test_, test_labels_, rows, out);
}

void ClassificationBatches::fill(const std::vector<Encoding>& set, const std::vector<int32_t>& labels,
                                 const std::vector<int64_t>& rows, Batch& out) const {
  const int64_t B = int64_t(rows.size());
  int64_t T = 2;  // a padding row is [CLS] [SEP]
  int64_t real = 0, real_rows = 0;
  for (int64_t r : rows) {
    if (r < 0) continue;
    T = std::max<int64_t>(T, int64_t(set[size_t(r)].ids.size()));
    real += int64_t(set[size_t(r)].ids.size());
    ++real_rows;
  }
  const ScopedOp site("batch");  // names the token tensors in memory reports
  out.inputs = Tensor::empty({B, T}, DType::i32, MemCategory::data);
  out.token_types = Tensor::empty({B, T}, DType::i32, MemCategory::data);
  out.attention_mask = Tensor::empty({B, T}, DType::i32, MemCategory::data);
  out.targets = Tensor::empty({B}, DType::i32, MemCategory::data);
  out.rows = real_rows;
  out.real_tokens = real;
  if (out.inputs.is_meta()) return;                    // shapes only
  int32_t* ids = out.inputs.data<int32_t>();           // (B, T)
  int32_t* types = out.token_types.data<int32_t>();    // (B, T)
  int32_t* mask = out.attention_mask.data<int32_t>();  // (B, T)
  int32_t* target = out.targets.data<int32_t>();       // (B)
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r = rows[size_t(b)];
    // A padding row attends to its two specials, so no row is all padding (a softmax over no keys).
    static const Encoding kPadRow;
    const Encoding& e = r >= 0 ? set[size_t(r)] : kPadRow;
    const int64_t n = r >= 0 ? int64_t(e.ids.size()) : 2;
    for (int64_t t = 0; t < T; ++t) {
      const bool in = t < n;
      ids[b * T + t] = !in ? pad_id_ : r >= 0 ? e.ids[size_t(t)] : (t == 0 ? cls_id_ : sep_id_);
      types[b * T + t] = in && r >= 0 ? e.type_ids[size_t(t)] : 0;
      mask[b * T + t] = in ? 1 : 0;
    }
    target[b] = r >= 0 ? labels[size_t(r)] : -1;
  }
}

}  // namespace mixtrain
