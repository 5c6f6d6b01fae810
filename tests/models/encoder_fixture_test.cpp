// mixtrain's encoder classifiers against PyTorch / transformers (tools/make_encoder_fixture.py,
// torch 2.15, transformers 5.24, fp32): a tiny random BertForSequenceClassification and
// DistilBertForSequenceClassification loaded from the Hugging Face directories the script saved,
// on one batch with padding, token types and a fully padded row (target -1): logits, loss, every
// parameter gradient under Hugging Face's names, BERT with mean pooling, and 3 AdamW steps.
//
// Tolerances (fp32 on both sides; only the summation order differs: oneDNN vs MKL GEMMs, blocked
// vs sequential reductions):
// - logits and loss: |d| <= 2e-5 max|ref| + 1e-4 |ref|. A logit ends 2 layers of C = 32 and
//   I = 37 term dot products plus the pooler: ~1e-6 relative expected, 20x margin (as the GPT
//   fixture).
// - gradients: |d| <= 1e-4 max|ref of the tensor| + 1e-3 |ref|: backward chains twice the
//   reductions and cancels in softmax / layer-norm backward (as the GPT fixture). The key biases'
//   gradients are exactly 0 in exact arithmetic (softmax is shift-invariant): both sides must be
//   below 1e-9 there.
// - AdamW: losses within 1e-4 relative, final weights within 2e-5 absolute (3 steps at lr 1e-3
//   move a weight by at most 3e-3; 2e-5 is < 1% of that).
#include <gtest/gtest.h>

#include "encoder_fixture_util.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/data/builtin_data.h"
#include "mixtrain/optim/adamw.h"
#include "models/encoder_model.h"

using namespace mixtrain;
using test::close;
using test::kEncoderFixtures;

namespace {

struct Loaded {
  test::Fixture fx;
  std::unique_ptr<Model> model;
  EncoderClassifier& enc() { return dynamic_cast<EncoderClassifier&>(*model); }
};

Loaded load(const std::string& kind, Pooling pooling = Pooling::cls) {
  Loaded l{test::load_fixture(kEncoderFixtures + kind + "_tiny.mtfx"), nullptr};
  l.model = load_encoder_classifier(kEncoderFixtures + kind + "_tiny",
                                    test::encoder_fixture_options(l.fx, pooling));
  return l;
}

// Logits, loss and every gradient named `prefix` + Hugging Face name in the fixture.
void check_forward_backward(Loaded& l, const std::string& prefix) {
  const Batch batch = test::encoder_fixture_batch(l.fx);
  l.model->params().zero_grads();
  ModelOutput out = l.model->forward_batch(batch, true, 7);
  EXPECT_EQ(out.logits.value().shape(), Shape({batch.inputs.size(0), 3}));
  EXPECT_TRUE(
      close(out.logits.value().to_floats(), l.fx.f32(prefix + "logits"), 2e-5, 1e-4, prefix + "logits"));
  const float ref_loss = l.fx.f32(prefix + "loss")[0];
  EXPECT_NEAR(out.loss.value().item(), ref_loss, 1e-4 * std::fabs(ref_loss));
  out.loss.backward();
  size_t compared = 0;
  for (const NamedWeight& g : l.enc().named_grads()) {
    const std::string key = prefix + "grad." + g.name;
    ASSERT_TRUE(l.fx.has(key)) << "the fixture has no " << key;
    const std::vector<float>& ref = l.fx.f32(key);
    if (test::max_abs(ref) < 1e-9) {
      // The key bias adds q . b_k to every score of a query row, which softmax cancels: its gradient
      // is exactly 0, and both sides hold only rounding noise (~1e-13 here, from O(1) terms).
      EXPECT_LE(test::max_abs(g.tensor.to_floats()), 1e-9) << key;
    } else {
      EXPECT_TRUE(close(g.tensor.to_floats(), ref, 1e-4, 1e-3, key));
    }
    ++compared;
  }
  size_t in_fixture = 0;
  for (const auto& [name, t] : l.fx.tensors) in_fixture += name.rfind(prefix + "grad.", 0) == 0;
  EXPECT_EQ(compared, in_fixture) << "every gradient of the fixture is one of the model's";
}

void check_adamw(Loaded& l) {
  const auto& hyper = l.fx.header.at("hyper");
  const Batch batch = test::encoder_fixture_batch(l.fx);
  AdamWConfig ac;
  ac.lr = hyper.at("lr").get<float>();
  ac.beta1 = hyper.at("beta1").get<float>();
  ac.beta2 = hyper.at("beta2").get<float>();
  ac.eps = hyper.at("eps").get<float>();
  ac.weight_decay = hyper.at("weight_decay").get<float>();
  AdamW opt(l.model->params(), ac);
  const auto& losses = l.fx.f32("adamw.losses");
  for (size_t step = 0; step < losses.size(); ++step) {
    l.model->params().zero_grads();
    ModelOutput out = l.model->forward_batch(batch, true, step);
    EXPECT_NEAR(out.loss.value().item(), losses[step], 1e-4 * std::fabs(losses[step])) << "step " << step + 1;
    out.loss.backward();
    opt.step(l.model->params());
  }
  for (const NamedWeight& w : l.model->named_weights()) {
    const auto got = w.tensor.to_floats();
    const auto& ref = l.fx.f32("final." + w.name);
    ASSERT_EQ(got.size(), ref.size()) << w.name;
    double worst = 0;
    for (size_t j = 0; j < ref.size(); ++j)
      worst = std::max(worst, std::fabs(static_cast<double>(got[j]) - ref[j]));
    EXPECT_LE(worst, 2e-5) << "final." << w.name;
  }
}

}  // namespace

TEST(EncoderFixture, BertLogitsLossAndEveryGradientMatchTransformers) {
  Loaded l = load("bert");
  EXPECT_EQ(l.model->family(), "bert");
  check_forward_backward(l, "");
}

TEST(EncoderFixture, BertMeanPoolingMatchesTheMaskedMeanIntoTheClassifier) {
  Loaded l = load("bert", Pooling::mean);
  for (const NamedWeight& w : l.model->named_weights())
    EXPECT_EQ(w.name.rfind("bert.pooler.", 0), std::string::npos) << "mean pooling declares no pooler";
  check_forward_backward(l, "mean.");
}

TEST(EncoderFixture, DistilBertLogitsLossAndEveryGradientMatchTransformers) {
  Loaded l = load("distilbert");
  EXPECT_EQ(l.model->family(), "distilbert");
  check_forward_backward(l, "");
}

TEST(EncoderFixture, BertThreeAdamWStepsMatchTorch) {
  Loaded l = load("bert");
  check_adamw(l);
}

TEST(EncoderFixture, DistilBertThreeAdamWStepsMatchTorch) {
  Loaded l = load("distilbert");
  check_adamw(l);
}

// The real all-MiniLM-L6-v2 (scripts/setup_data.sh installs it; builtin_data_path throws, failing
// the test, when it is missing): a bare BertModel file (names without "bert."), so the head is not
// in it; the fixture's seeded head is copied in. Logits, loss and a few gradients (the fixture
// keeps only those, to stay small). Same tolerances as the tiny models: the model is deeper (6
// layers, C = 384, I = 1536) but the measured errors stay ~1e-6 relative.
TEST(EncoderFixture, MiniLmLogitsLossAndChosenGradientsMatchTransformers) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "minilm.mtfx");
  std::unique_ptr<Model> model =
      load_encoder_classifier(builtin_data_path(kDefaultEncoderModel), test::encoder_fixture_options(fx));
  auto& enc = dynamic_cast<EncoderClassifier&>(*model);
  EXPECT_EQ(enc.config().layers, 6);
  EXPECT_FLOAT_EQ(enc.config().layer_norm_eps, 1e-12f);
  for (const NamedWeight& w : model->named_weights())
    if (w.name.rfind("classifier.", 0) == 0) {
      const auto& v = fx.f32("head." + w.name);
      NamedWeight dst = w;
      dst.tensor.copy_from(Tensor::from_floats(v, w.tensor.shape(), DType::f32));
    }
  const Batch batch = test::encoder_fixture_batch(fx);
  model->params().zero_grads();
  ModelOutput out = model->forward_batch(batch, true, 1);
  EXPECT_TRUE(close(out.logits.value().to_floats(), fx.f32("logits"), 2e-5, 1e-4, "logits"));
  EXPECT_NEAR(out.loss.value().item(), fx.f32("loss")[0], 1e-4 * std::fabs(fx.f32("loss")[0]));
  out.loss.backward();
  size_t compared = 0;
  for (const NamedWeight& g : enc.named_grads()) {
    if (!fx.has("grad." + g.name)) continue;
    EXPECT_TRUE(close(g.tensor.to_floats(), fx.f32("grad." + g.name), 1e-4, 1e-3, "grad." + g.name));
    ++compared;
  }
  EXPECT_EQ(compared, fx.header.at("param_names").size());
}

// Activation checkpointing: the same loss and gradients bit for bit, with dropout on (each layer's
// recomputation draws the masks of its forward run), in fp32 and under bf16 autocast.
TEST(EncoderFixture, ActivationCheckpointingGivesTheSameGradientsBitForBit) {
  for (const char* kind : {"bert", "distilbert"})
    for (bool amp : {false, true}) {
      std::vector<float> grads[2];
      double losses[2];
      for (int ckpt = 0; ckpt < 2; ++ckpt) {
        const test::Fixture fx = test::load_fixture(kEncoderFixtures + std::string(kind) + "_tiny.mtfx");
        ClassifierOptions o = test::encoder_fixture_options(fx);
        o.dropout = 0.2f;
        std::unique_ptr<Model> m = load_encoder_classifier(kEncoderFixtures + kind + "_tiny", o);
        m->set_activation_checkpointing(ckpt == 1);
        m->params().zero_grads();
        autograd::Var loss;
        {
          AutocastScope scope(amp, DType::bf16);
          loss = m->forward_batch(test::encoder_fixture_batch(fx), true, 42).loss;
        }
        loss.backward();
        losses[ckpt] = loss.value().item();
        grads[ckpt] = m->params().flat_grads().to_floats();
      }
      EXPECT_EQ(losses[0], losses[1]) << kind << (amp ? " bf16" : " fp32");
      EXPECT_TRUE(grads[0] == grads[1]) << kind << (amp ? " bf16" : " fp32");
    }
}

// DistilBERT's sinusoidal_pos_embds: the positions are Hugging Face's create_sinusoidal_embeddings
// (sin on even, cos on odd columns), and fixed: no gradient, no weight decay.
TEST(EncoderFixture, DistilBertSinusoidalPositionsAreFixed) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "distilbert_tiny.mtfx");
  EncoderConfig cfg = EncoderConfig::from_hf_json(nlohmann::json{{"model_type", "distilbert"},
                                                                 {"vocab_size", 99},
                                                                 {"dim", 32},
                                                                 {"n_layers", 1},
                                                                 {"n_heads", 4},
                                                                 {"hidden_dim", 37},
                                                                 {"max_position_embeddings", 24},
                                                                 {"sinusoidal_pos_embds", true}},
                                                  "sinusoidal test");
  EncoderClassifier m(cfg, test::encoder_fixture_options(fx));
  const std::string name = "distilbert.embeddings.position_embeddings.weight";
  const auto pos = m.params().param(name).to_floats();
  for (int64_t p : {0, 5, 23})
    for (int64_t j : {0, 1, 6, 31}) {
      const double a = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / 32.0);
      EXPECT_NEAR(pos[static_cast<size_t>(p * 32 + j)], j % 2 == 0 ? std::sin(a) : std::cos(a), 1e-6);
    }
  EXPECT_FALSE(m.params().info(name).weight_decay);
  m.params().zero_grads();
  m.forward_batch(test::encoder_fixture_batch(fx), true, 1).loss.backward();
  EXPECT_EQ(test::max_abs(m.params().grad(name).to_floats()), 0.0);
  EXPECT_GT(test::max_abs(m.params().grad("distilbert.embeddings.word_embeddings.weight").to_floats()), 0.0);
}
