// The encoder classifiers under bf16 and f16 autocast against the fp32 transformers fixtures
// (tools/make_encoder_fixture.py; see encoder_fixture_test.cpp): logits, loss and every parameter
// gradient within bounds derived from the format's epsilon (bf16 2^-7, f16 2^-10; the same k for
// both, as every error below scales with eps), and measurably worse than the fp32 run's, which
// proves the GEMMs really ran in 16 bits. f16 backpropagates a scaled loss, as 16-mixed does.
//
// Error measure, per tensor: max_i |got_i - ref_i| / max_i |ref_i|, in units of eps.
// - Where the error comes from (as gpt_fixture_amp_test.cpp): every GEMM input and output is
//   rounded to bf16 (<= eps/2 relative each), accumulation, layer norm, softmax and the loss are
//   fp32, the residual stream stays fp32. A logit passes 2 layers x 4 GEMMs (qkv, q k^T, p v,
//   attention output; the two FFN GEMMs), the pooler and the classifier: ~20 roundings, adding as a
//   random walk to ~sqrt(20) * eps/2 ~ 2.2 eps relative a priori. kLogitK = 3.
// - Gradients chain about twice as many roundings, and softmax / layer-norm backward subtract
//   nearly equal terms: ~sqrt(2) x the logits' scale a priori (~3 eps); kGradK = 6 (as GPT's bound
//   relative to its logits' bound: 2 to 2.7x); measured worst 3.6 eps (BERT, bf16), 3.9 eps (BERT, f16). The
//   head's biases: see kHeadBiasK. The key biases' gradients are 0 in exact arithmetic (softmax is
//   shift-invariant), so only noise is left there: compared in absolute terms instead, at most kGradK * eps
//   times the largest query-bias gradient of the same layer.
// - Loss: 1-Lipschitz in the logits' max norm through log-sum-exp and the target pick, so
//   |d loss| <= 2 max|d logit| (+ fp32 noise).
// - Not trivially loose: the errors must be more than 100x the fp32 run's, and the logit error at
//   least 0.05 eps.
#include <gtest/gtest.h>

#include <cstdio>

#include "encoder_fixture_util.h"
#include "mixtrain/amp/autocast.h"
#include "models/encoder_model.h"

using namespace mixtrain;
using test::kEncoderFixtures;
using test::max_abs;
using test::rel_err;

namespace {

constexpr double kLogitK = 3.0;
constexpr double kGradK = 6.0;
// The head's biases (pooler, pre_classifier, classifier) get the sum over the batch's B = 3 real
// rows of one term each; the terms have mixed signs, so the sum (the tensor's max) is smaller than
// the terms that carry the rounding: measured worst 7.3 eps (BERT's pooler bias). Their error is
// scaled by kGradK / kHeadBiasK before the common check, i.e. bounded by 12 eps.
constexpr double kHeadBiasK = 12.0;

struct RunErrors {
  DType logits_dtype = DType::f32;
  double logits = 0, logits_abs = 0, loss_abs = 0;
  std::vector<std::pair<std::string, double>> grads;
  double worst_grad() const {
    double w = 0;
    for (const auto& g : grads) w = std::max(w, g.second);
    return w;
  }
};

bool is_head_bias(const std::string& n) {
  return n == "bert.pooler.dense.bias" || n == "pre_classifier.bias" || n == "classifier.bias";
}

bool is_key_bias(const std::string& n) {
  return n.find(".key.bias") != std::string::npos || n.find(".k_lin.bias") != std::string::npos;
}

RunErrors run(const test::Fixture& fx, const std::string& kind, DType ac) {
  std::unique_ptr<Model> model =
      load_encoder_classifier(kEncoderFixtures + kind + "_tiny", test::encoder_fixture_options(fx));
  const Batch batch = test::encoder_fixture_batch(fx);
  model->params().zero_grads();
  RunErrors e;
  autograd::Var loss;
  {
    AutocastScope scope(ac != DType::f32, ac == DType::f32 ? DType::bf16 : ac);
    ModelOutput out = model->forward_batch(batch, true, 3);
    const auto logits = out.logits.value().to_floats();
    e.logits_dtype = out.logits.dtype();
    e.logits = rel_err(logits, fx.f32("logits"));
    e.logits_abs = rel_err(logits, fx.f32("logits")) * max_abs(fx.f32("logits"));
    e.loss_abs = std::fabs(out.loss.value().item() - fx.f32("loss")[0]);
    loss = out.loss;
  }
  // f16 runs as 16-mixed does, with the loss scaled by GradScaler's initial 2^16 before backward
  // and the gradients unscaled in fp32: the tiny model's q / k gradients (through the softmax
  // backward, ~1e-7) are below f16's normal range otherwise (measured 170 eps off unscaled).
  const float loss_scale = ac == DType::f16 ? 65536.f : 1.f;
  loss.backward_from(Tensor::full({1}, DType::f32, loss_scale));
  const auto grads = dynamic_cast<EncoderClassifier&>(*model).named_grads();
  for (const NamedWeight& g : grads) {
    std::vector<float> got = g.tensor.to_floats();
    for (float& v : got) v /= loss_scale;
    if (is_key_bias(g.name)) {  // exact value 0: absolute error against the query bias's scale
      std::string q = g.name;
      const bool bert = q.find(".key.") != std::string::npos;
      const std::string from = bert ? ".key." : ".k_lin.", to = bert ? ".query." : ".q_lin.";
      q.replace(q.find(from), from.size(), to);
      e.grads.emplace_back(g.name, max_abs(got) / max_abs(fx.f32("grad." + q)));
      continue;
    }
    // The head's biases: B = 3 real rows, see kHeadBiasK.
    const double k = is_head_bias(g.name) ? kGradK / kHeadBiasK : 1.0;
    e.grads.emplace_back(g.name, k * rel_err(got, fx.f32("grad." + g.name)));
  }
  return e;
}

void check(const std::string& kind, DType ac) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + kind + "_tiny.mtfx");
  const double eps = dtype_epsilon(ac);
  const RunErrors f32 = run(fx, kind, DType::f32);
  const RunErrors amp = run(fx, kind, ac);
  std::printf(
      "%s autocast %s: logits %.3f eps (bound %.1f; fp32 run %.2e eps), |d loss| %.3g (bound %.3g), "
      "worst grad %.3f eps (bound %.1f; fp32 run %.2e eps)\n",
      kind.c_str(), std::string(dtype_name(ac)).c_str(), amp.logits / eps, kLogitK, f32.logits / eps,
      amp.loss_abs, 2 * amp.logits_abs, amp.worst_grad() / eps, kGradK, f32.worst_grad() / eps);
  for (const auto& [name, err] : amp.grads) std::printf("  grad.%-55s %.3f eps\n", name.c_str(), err / eps);
  EXPECT_EQ(amp.logits_dtype, ac);
  EXPECT_GT(amp.logits, 100 * f32.logits);
  EXPECT_GT(amp.worst_grad(), 100 * f32.worst_grad());
  EXPECT_GT(amp.logits, 0.05 * eps) << "logit error too small to come from " << dtype_name(ac) << " rounding";
  EXPECT_LE(amp.logits, kLogitK * eps) << "logits";
  EXPECT_LE(amp.loss_abs, 2 * amp.logits_abs + 1e-5) << "loss";
  for (const auto& [name, err] : amp.grads) EXPECT_LE(err, kGradK * eps) << "grad." << name;
}

}  // namespace

TEST(EncoderFixtureAmp, BertAutocastBf16WithinBf16Bounds) { check("bert", DType::bf16); }

TEST(EncoderFixtureAmp, DistilBertAutocastBf16WithinBf16Bounds) { check("distilbert", DType::bf16); }

TEST(EncoderFixtureAmp, BertAutocastF16WithinF16Bounds) { check("bert", DType::f16); }

TEST(EncoderFixtureAmp, DistilBertAutocastF16WithinF16Bounds) { check("distilbert", DType::f16); }
