// ClassificationBatches on a small vocabulary: dynamic padding, real tokens, truncation, sentence
// pairs, per-epoch shuffles that are functions of (seed, position), evaluation batches that
// cover the test set once (padding rows with target -1), the baselines, and bad arguments.
#include "mixtrain/data/classification_batches.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "mixtrain/core/error.h"
#include "mixtrain/tensor/device.h"

namespace mixtrain {
namespace {

// [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 a=5 b=6 c=7 d=8
WordPieceTokenizer tiny_vocab() {
  return WordPieceTokenizer::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d"},
                                         "vocab", WordPieceTokenizer::Options{});
}

// Examples "a", "a b", "a b c", ... with labels cycling over {x, y}; test: `n_test` rows.
TextClassificationData set_of(int n, const std::string& name, bool pairs = false) {
  TextClassificationData d;
  d.path = name;
  d.labels = {"x", "y"};
  for (int i = 0; i < n; ++i) {
    TextExample e;
    for (int w = 0; w <= i % 4; ++w) e.text += std::string(w ? " " : "") + char('a' + w);
    if (pairs) e.text_pair = "d";
    e.label = i % 3 == 0 ? 1 : 0;
    e.line = i + 2;
    d.examples.push_back(e);
  }
  return d;
}

TEST(ClassificationBatches, DynamicPaddingAndRealTokens) {
  const TextClassificationData train = set_of(10, "train"), test = set_of(5, "test");
  const ClassificationBatches data(train, test, tiny_vocab(), 4, 16, 7);
  EXPECT_EQ(data.batches_per_epoch(), 3);  // 4 + 4 + 2
  EXPECT_EQ(data.num_eval_batches(), 2);   // 4 + 1 (and 3 padding rows)
  EXPECT_EQ(data.sequence_length(), 16);
  Batch b;
  data.eval_batch(0, b);                       // test rows 0..3: "a", "a b", "a b c", "a b c d"
  ASSERT_EQ(b.inputs.shape(), (Shape{4, 6}));  // the longest: [CLS] a b c d [SEP]
  EXPECT_EQ(b.inputs.to_ints(), (std::vector<int32_t>{2, 5, 3, 0, 0, 0,  //
                                                      2, 5, 6, 3, 0, 0,  //
                                                      2, 5, 6, 7, 3, 0,  //
                                                      2, 5, 6, 7, 8, 3}));
  EXPECT_EQ(b.attention_mask.to_ints(), (std::vector<int32_t>{1, 1, 1, 0, 0, 0,  //
                                                              1, 1, 1, 1, 0, 0,  //
                                                              1, 1, 1, 1, 1, 0,  //
                                                              1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b.token_types.to_ints(), std::vector<int32_t>(24, 0));
  EXPECT_EQ(b.targets.to_ints(), (std::vector<int32_t>{1, 0, 0, 1}));
  EXPECT_EQ(b.rows, 4);
  EXPECT_EQ(b.real_tokens, 3 + 4 + 5 + 6);

  data.eval_batch(1, b);  // test row 4 ("a") and three padding rows
  ASSERT_EQ(b.inputs.shape(), (Shape{4, 3}));
  EXPECT_EQ(b.inputs.to_ints(), (std::vector<int32_t>{2, 5, 3, /**/ 2, 3, 0, /**/ 2, 3, 0, /**/ 2, 3, 0}));
  EXPECT_EQ(b.targets.to_ints(), (std::vector<int32_t>{0, -1, -1, -1}));
  EXPECT_EQ(b.rows, 1);
  EXPECT_EQ(b.real_tokens, 3);
  EXPECT_THROW(data.eval_batch(2, b), ArgumentError);
  EXPECT_THROW(data.eval_batch(-1, b), ArgumentError);
}

TEST(ClassificationBatches, TruncationAndPairs) {
  const TextClassificationData train = set_of(4, "train", true), test = set_of(4, "test", true);
  const ClassificationBatches data(train, test, tiny_vocab(), 4, 5, 1);
  Batch b;
  data.eval_batch(0, b);
  ASSERT_EQ(b.inputs.shape(), (Shape{4, 5}));
  // Row 3 ("a b c d" + "d") cut to max_len 5 the longest-first way: [CLS] a [SEP] d [SEP].
  EXPECT_EQ(b.inputs.to_ints(), (std::vector<int32_t>{2, 5, 3, 8, 3, /**/ 2, 5, 3, 8, 3,  //
                                                      2, 5, 3, 8, 3, /**/ 2, 5, 3, 8, 3}));
  EXPECT_EQ(b.token_types.to_ints(), (std::vector<int32_t>{0, 0, 0, 1, 1, /**/ 0, 0, 0, 1, 1,  //
                                                           0, 0, 0, 1, 1, /**/ 0, 0, 0, 1, 1}));
  EXPECT_EQ(b.real_tokens, 20);
}

TEST(ClassificationBatches, EpochsShuffleEveryExampleOnceAndArePureFunctionsOfThePosition) {
  const TextClassificationData train = set_of(10, "train"), test = set_of(3, "test");
  const ClassificationBatches data(train, test, tiny_vocab(), 4, 16, 42);
  const std::vector<int64_t> e0 = data.epoch_order(0), e1 = data.epoch_order(1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 10u);
  EXPECT_EQ(std::set<int64_t>(e1.begin(), e1.end()).size(), 10u);
  EXPECT_NE(e0, e1);  // a new order each epoch
  // Positions 1-3 are epoch 0, 4-6 epoch 1; the last batch of an epoch is short.
  Batch b;
  int64_t rows = 0;
  for (int64_t p = 1; p <= 3; ++p) {
    data.train_batch(p, b);
    rows += b.rows;
    EXPECT_EQ(b.targets.numel(), b.rows);  // no padding rows in training
  }
  EXPECT_EQ(rows, 10);
  EXPECT_EQ(b.rows, 2);
  // The batch at a position does not depend on what was read before (resume reads the same).
  data.train_batch(5, b);
  const std::vector<int32_t> ids5 = b.inputs.to_ints(), y5 = b.targets.to_ints();
  const ClassificationBatches fresh(train, test, tiny_vocab(), 4, 16, 42);
  Batch c;
  fresh.train_batch(5, c);
  EXPECT_EQ(c.inputs.to_ints(), ids5);
  EXPECT_EQ(c.targets.to_ints(), y5);
  // Position 5 is epoch 1's second batch: examples e1[4..7].
  const std::vector<int32_t> all_targets{1, 0, 0, 1, 0, 0, 1, 0, 0, 1};
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(y5[size_t(k)], all_targets[size_t(e1[size_t(4 + k)])]);
  // Another seed, another order.
  const ClassificationBatches other(train, test, tiny_vocab(), 4, 16, 43);
  EXPECT_NE(other.epoch_order(0), e0);
  EXPECT_THROW(data.train_batch(0, b), ArgumentError);
}

TEST(ClassificationBatches, BaselinesComeFromTheTestSet) {
  const TextClassificationData train = set_of(10, "train"),
                               test = set_of(6, "test");  // test labels 1,0,0,1,0,0
  const ClassificationBatches data(train, test, tiny_vocab(), 4, 16, 1);
  EXPECT_DOUBLE_EQ(data.majority_baseline(), 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(data.baseline_loss(),
                   -(2.0 / 6.0) * std::log(2.0 / 6.0) - (4.0 / 6.0) * std::log(4.0 / 6.0));
  EXPECT_EQ(data.num_classes(), 2);
}

TEST(ClassificationBatches, MetaBatchesHaveTheRealShapes) {
  const TextClassificationData train = set_of(10, "train"), test = set_of(5, "test");
  const ClassificationBatches data(train, test, tiny_vocab(), 4, 16, 7);
  Batch real, meta;
  data.train_batch(2, real);
  {
    const DeviceScope scope(Device::meta());
    data.train_batch(2, meta);
  }
  EXPECT_TRUE(meta.inputs.is_meta());
  EXPECT_EQ(meta.inputs.shape(), real.inputs.shape());
  EXPECT_EQ(meta.targets.shape(), real.targets.shape());
  EXPECT_EQ(meta.real_tokens, real.real_tokens);
}

TEST(ClassificationBatches, BadArguments) {
  const TextClassificationData train = set_of(4, "train"), test = set_of(4, "test");
  EXPECT_THROW(ClassificationBatches(train, test, tiny_vocab(), 0, 16, 1), ArgumentError);
  EXPECT_THROW(ClassificationBatches(train, test, tiny_vocab(), 4, 1, 1), ArgumentError);
  EXPECT_THROW(ClassificationBatches(set_of(4, "p", true), set_of(4, "q", true), tiny_vocab(), 4, 2, 1),
               ArgumentError);
  EXPECT_THROW(ClassificationBatches(set_of(0, "empty"), test, tiny_vocab(), 4, 16, 1), ArgumentError);
  TextClassificationData other_labels = test;
  other_labels.labels = {"x", "y", "z"};
  EXPECT_THROW(ClassificationBatches(train, other_labels, tiny_vocab(), 4, 16, 1), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
