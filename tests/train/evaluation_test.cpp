// Evaluation metrics: Model::evaluate_batch's loss and top-1 accuracy on known logits (ignored
// targets left out, ties to the first index), and train()'s summary and step log carrying them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "mixtrain/models/model.h"
#include "mixtrain/train/trainer.h"
#include "train/tiny_run.h"

namespace mixtrain {
namespace {

// A model whose forward returns fixed logits and loss: only evaluate_batch is under test.
class FixedLogits final : public Model {
 public:
  FixedLogits(Tensor logits, double loss) : logits_(std::move(logits)), loss_(loss) {}
  std::string_view family() const override { return "fixed"; }
  ParameterStore& params() override { return store_; }
  const ParameterStore& params() const override { return store_; }
  ModelOutput forward_batch(const Batch&, bool, uint64_t) override {
    return {autograd::Var(logits_),
            autograd::Var(Tensor::from_floats({static_cast<float>(loss_)}, {}, DType::f32))};
  }
  double flops_per_token(int64_t) const override { return 0; }
  void set_activation_checkpointing(bool) override {}
  std::string config_json() const override { return "{}"; }
  std::vector<NamedWeight> named_weights() const override { return {}; }

 private:
  ParameterStore store_;
  Tensor logits_;
  double loss_;
};

TEST(Evaluation, TopOneAccuracyOverTheScoredTargets) {
  // (2, 3, 4): argmax per position = 1, 0 (tie: first), 3 | 2, 2, 0
  const Tensor logits = Tensor::from_floats(
      {0, 5, 1, 2, /**/ 3, 3, 1, 0, /**/ 0, 0, 0, 9, 1, 2, 8, 3, /**/ 0, 1, 4, 2, /**/ 7, 1, 1, 1}, {2, 3, 4},
      DType::bf16);
  Batch b;
  b.targets = Tensor::from_ints({1, 1, 3, /**/ 2, -1, -1}, {2, 3});
  b.inputs = Tensor::from_ints({0, 0, 0, 0, 0, 0}, {2, 3});
  b.rows = 2;
  FixedLogits m(logits, 0.75);
  const EvalSums s = m.evaluate_batch(b);
  EXPECT_EQ(s.rows, 2);
  EXPECT_DOUBLE_EQ(s.loss_sum, 1.5);
  EXPECT_EQ(s.scored, 4);   // the two -1 targets are not scored
  EXPECT_EQ(s.correct, 3);  // 1 == 1, 0 != 1, 3 == 3, 2 == 2
  EvalSums total;
  total.add(s);
  total.add(s);
  EXPECT_EQ(total.correct, 6);
  EXPECT_EQ(total.scored, 8);

  b.targets = Tensor::from_ints({1, 1, 3, 2}, {2, 2});  // not the logits' leading shape
  EXPECT_THROW(m.evaluate_batch(b), ShapeError);
}

TEST(Evaluation, TrainReportsValidationAccuracyInItsSummaryAndLog) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_bf16);
  o.steps = 4;
  o.eval_every = 2;
  o.log_jsonl = testing::TempDir() + "evaluation_test_log.jsonl";
  std::remove(o.log_jsonl.c_str());
  const TrainSummary s = train(o);
  EXPECT_GE(s.val_accuracy, 0.0);
  EXPECT_LE(s.val_accuracy, 1.0);
  std::ifstream f(o.log_jsonl);
  std::string line, last_eval;
  int evaluated = 0;
  while (std::getline(f, line))
    if (line.find("\"val_accuracy\"") != std::string::npos) {
      ++evaluated;
      last_eval = line;
    }
  EXPECT_EQ(evaluated, 2);  // steps 2 and 4
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", s.val_accuracy);
  const double logged = std::stod(last_eval.substr(last_eval.find("\"val_accuracy\":") + 15));
  EXPECT_EQ(logged, s.val_accuracy) << last_eval << " vs " << buf;
}

}  // namespace
}  // namespace mixtrain
