// Memory prediction works for the encoder classifier: two training steps of the tiny BERT and
// DistilBERT (fixture configs), with padding and token types, in 32-true and bf16-mixed, with and
// without activation checkpointing (and BERT in 16-mixed, bf16-true and 16-true), run on the meta device
// (predict_memory) and on the CPU; the predicted peak, every category's peak and the terms alive at the peak
// must equal the CPU's tracker to the byte (the GPT form is tests/train/memory_prediction_test.cpp).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kernels/attention_ops.h"
#include "kernels/cpu/amx_tiles.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/train/memory_prediction.h"
#include "models/encoder_model.h"

using namespace mixtrain;

namespace {

EncoderConfig fixture_config(const std::string& kind) {
  const std::string path = MIXTRAIN_SOURCE_DIR "/tests/fixtures/encoder/" + kind + "_tiny/config.json";
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return EncoderConfig::from_hf_json(nlohmann::json::parse(s.str()), path);
}

// Two steps of a training loop written out (MixedPrecision, AdamW, clipping), on the default device.
void two_steps(const EncoderConfig& cfg, const std::string& precision, bool ckpt, Pooling pooling) {
  MixedPrecision mp(precision);
  ClassifierOptions o;
  o.labels = {"a", "b", "c"};
  o.pooling = pooling;
  o.dropout = 0.1f;
  EncoderClassifier model(cfg, o, mp.param_dtype(), mp.grad_dtype(),
                          mp.spec().autocast ? MemCategory::master_weights : MemCategory::parameters);
  model.set_activation_checkpointing(ckpt);
  AdamW opt(model.params(), AdamWConfig{});
  const int64_t B = 4, T = 12;
  std::vector<int32_t> ids(B * T, 0), types(B * T, 0), mask(B * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T - 2 * b; ++t) {
      ids[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(1 + (b * 7 + t * 3) % 90);
      mask[static_cast<size_t>(b * T + t)] = 1;
      types[static_cast<size_t>(b * T + t)] = t > 5 ? 1 : 0;
    }
  Batch batch;
  batch.inputs = Tensor::from_ints(ids, {B, T});
  batch.token_types = Tensor::from_ints(types, {B, T});
  batch.attention_mask = Tensor::from_ints(mask, {B, T});
  batch.targets = Tensor::from_ints({0, 2, 1, -1}, {B});
  for (int step = 1; step <= 2; ++step) {
    model.params().zero_grads();
    ModelOutput out =
        mp.forward([&] { return model.forward_batch(batch, true, static_cast<uint64_t>(step)); });
    mp.backward(out.loss);
    mp.step(opt, model.params(), 1e-3f, 1.0);
  }
}

// heads > 0 replaces the fixture's head count (one head of 32: the fused attention's head size).
void expect_prediction_exact(const std::string& kind, const std::string& precision, bool ckpt,
                             Pooling pooling, int64_t heads = 0) {
  EncoderConfig cfg = fixture_config(kind);
  if (heads > 0) cfg.heads = heads;
  const std::string what = kind + " " + precision + (ckpt ? " checkpointing" : "") +
                           (pooling == Pooling::mean ? " mean pooling" : "") +
                           (heads > 0 ? " heads " + std::to_string(heads) : "");
  const MemoryPrediction p = predict_memory([&] { two_steps(cfg, precision, ckpt, pooling); });
  MemoryTracker& cpu = MemoryTracker::global();
  const MemorySnapshot before = cpu.snapshot();
  cpu.reset_peaks();
  two_steps(cfg, precision, ckpt, pooling);
  const MemorySnapshot after = cpu.snapshot();
  EXPECT_GT(p.peak_bytes, 0) << what;
  EXPECT_EQ(p.peak_bytes, after.peak_total - before.live_total)
      << what << " (predicted peak at " << p.peak_moment << ")";
  for (size_t c = 0; c < kNumMemCategories; ++c)
    EXPECT_EQ(p.peak_by_category[c], after.peak[c] - before.live[c])
        << what << ": " << mem_category_name(static_cast<MemCategory>(c));
  int64_t at_peak = 0;
  for (const MemoryTerm& t : p.terms) at_peak += t.bytes;
  EXPECT_EQ(at_peak, p.peak_bytes) << what;
  // Live afterwards only the GEMM's per-thread scratch (gemm_onednn.cpp ThreadScratch), kept on purpose.
  EXPECT_EQ(after.live_total - after.live[static_cast<size_t>(MemCategory::workspace)],
            before.live_total - before.live[static_cast<size_t>(MemCategory::workspace)])
      << what << ": the run left memory behind";
}

}  // namespace

TEST(EncoderMemory, PredictionEqualsTheCpuRunToTheByte) {
  for (const char* kind : {"bert", "distilbert"})
    for (const char* precision : {"32-true", "bf16-mixed"})
      for (bool ckpt : {false, true}) expect_prediction_exact(kind, precision, ckpt, Pooling::cls);
  expect_prediction_exact("bert", "bf16-mixed", false, Pooling::mean);
  // The other modes (16-bit weights, the loss scaler) run and are predicted too.
  for (const char* precision : {"16-mixed", "bf16-true", "16-true"})
    expect_prediction_exact("bert", precision, false, Pooling::cls);
  // Head size 32: on a CPU with AMX the fused encoder attention runs (kernels/attention_ops.h), its
  // per-thread workspace predicted too; elsewhere the composed op again.
  EXPECT_EQ(masked_attention_fused_applies(Tensor::zeros({4, 12, 32}, DType::bf16)),
            cpu::tiles::amx_usable());
  for (bool ckpt : {false, true}) expect_prediction_exact("bert", "bf16-mixed", ckpt, Pooling::cls, 1);
}

TEST(EncoderMemory, TermsAreNamedByHuggingFaceModulePaths) {
  const EncoderConfig cfg = fixture_config("bert");
  const MemoryPrediction p = predict_memory([&] { two_steps(cfg, "bf16-mixed", false, Pooling::cls); });
  bool named = false;
  for (const MemoryTerm& t : p.terms) named = named || t.name.rfind("bert.encoder.layer.*.", 0) == 0;
  EXPECT_TRUE(named) << "no term under bert.encoder.layer.*; peak at " << p.peak_moment;
  // The attention is one op (masked_attention_qkv) that keeps no probabilities: at the peak the
  // attention holds only q, k and v (the heads it copies out of qkv at this head size of 8, which
  // the fused kernel does not take), in bf16 under bf16 autocast, never fp32; no softmax or dropout
  // term of size T x T.
  int64_t bf16 = 0, f32 = 0, probabilities = 0;
  for (const MemoryTerm& t : p.terms) {
    if (t.name.find("attention.self masked_softmax") != std::string::npos ||
        t.name.find("attention.self dropout") != std::string::npos)
      probabilities += t.bytes;
    if (t.name.find("attention.self masked_attention_qkv") == std::string::npos) continue;
    (t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, "bf16") == 0 ? bf16 : f32) += t.bytes;
  }
  EXPECT_GT(bf16, 0) << "peak at " << p.peak_moment;
  EXPECT_EQ(f32, 0);
  EXPECT_EQ(probabilities, 0);
}
