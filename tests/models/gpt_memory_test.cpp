// The memory predictor on its own (no training): the fixed state follows the precision table
// and the optimizer, what a block keeps for backward has the sizes the ops say, checkpointing and
// 16-bit activations lower the peak, gpt2-small at batch 8, seq 1024 with checkpointing fits in
// 24 GiB, and bad input is refused; then a few configurations against measured runs (the whole
// matrix is gpt_memory_slow_test.cpp).
#include "mixtrain/models/gpt_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/attention_ops.h"  // attention_query_block
#include "mixtrain/core/error.h"
#include "models/gpt_memory_util.h"

namespace mixtrain {
namespace {

int64_t cat(const GptMemoryPrediction& p, MemCategory c) {
  return p.peak_by_category[static_cast<size_t>(c)];
}

GptMemoryOptions opts(PrecisionMode m, int64_t B, int64_t T, bool ckpt = false) {
  GptMemoryOptions o;
  o.precision = m;
  o.batch_size = B;
  o.seq_len = T;
  o.checkpoint_activations = ckpt;
  return o;
}

// The bytes of the named terms alive at the predicted peak.
int64_t term_bytes(const GptMemoryPrediction& p, const std::string& name_start) {
  int64_t b = 0;
  for (const MemoryTerm& t : p.terms)
    if (t.name.rfind(name_start, 0) == 0) b += t.bytes;
  return b;
}

TEST(GptMemory, ParameterCountIsGpt2sWithTheTiedHead) {
  const GptConfig c = GptConfig::preset("gpt-nano");
  const int64_t C = c.n_embd, V = c.vocab_size, L = c.n_layer;
  const GptMemoryPrediction p = predict_gpt_memory(c, opts(PrecisionMode::true32, 2, 16));
  // wte (no separate lm_head), wpe, per block 12 C^2 + 13 C, ln_f.
  EXPECT_EQ(p.parameters, V * C + c.block_size * C + L * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(p.parameters, 842496);
  EXPECT_GE(p.flat_parameters, p.parameters);  // each tensor padded to 16 elements
  EXPECT_LT(p.flat_parameters, p.parameters + 16 * 64);
}

TEST(GptMemory, FixedStateFollowsThePrecisionModeAndTheOptimizer) {
  const GptConfig c = GptConfig::preset("gpt-nano");
  for (PrecisionMode m : all_precision_modes()) {
    const PrecisionSpec& s = precision_spec(m);
    const bool mixed = s.autocast;
    for (const char* optimizer : {"adamw", "sgd"}) {
      for (UpdateRounding r : {UpdateRounding::nearest, UpdateRounding::kahan}) {
        GptMemoryOptions o = opts(m, 2, 16);
        o.optimizer = parse_optimizer_kind(optimizer);
        o.update_rounding = r;
        const GptMemoryPrediction p = predict_gpt_memory(c, o);
        const int64_t n = p.flat_parameters, pb = static_cast<int64_t>(dtype_size(s.param_dtype));
        const std::string what =
            std::string(s.name) + " " + optimizer + " " + std::string(update_rounding_name(r));
        // *-mixed: fp32 masters plus a 16-bit working copy; otherwise the weights themselves.
        EXPECT_EQ(cat(p, MemCategory::master_weights), mixed ? 4 * n : 0) << what;
        EXPECT_EQ(cat(p, MemCategory::parameters), mixed ? 2 * n : pb * n) << what;
        EXPECT_EQ(cat(p, MemCategory::gradients), static_cast<int64_t>(dtype_size(s.grad_dtype)) * n) << what;
        // AdamW: two moments; SGD: a momentum buffer; Kahan (16-bit weights only): a compensation.
        const int64_t buffers = (std::string(optimizer) == "adamw" ? 2 : 1) +
                                (r == UpdateRounding::kahan && s.param_dtype != DType::f32 ? 1 : 0);
        EXPECT_EQ(cat(p, MemCategory::optimizer_state), buffers * pb * n) << what;
        // The first step's casts of the weights (before the working copy exists): every matrix and
        // bias a GEMM reads, not the position embedding or the layer-norm parameters.
        const int64_t C = c.n_embd, L = c.n_layer;
        EXPECT_EQ(cat(p, MemCategory::cast_cache),
                  mixed ? 2 * (c.vocab_size * C + L * (12 * C * C + 9 * C)) : 0)
            << what;
      }
    }
  }
  GptMemoryOptions o = opts(PrecisionMode::true_bf16, 2, 16);
  o.optimizer = OptimizerKind::sgd;
  o.momentum = 0.f;
  EXPECT_EQ(cat(predict_gpt_memory(c, o), MemCategory::optimizer_state), 0);
}

TEST(GptMemory, WhatTheBlocksKeepForBackward) {
  const GptConfig c = GptConfig::preset("gpt-mini");  // L 6, C 384, H 6
  const int64_t B = 4, T = 256, C = c.n_embd, H = c.n_head, L = c.n_layer;
  const GptMemoryPrediction p = predict_gpt_memory(c, opts(PrecisionMode::mixed_bf16, B, T));
  // Peak at the end of the forward pass: every block's probabilities, once, in bf16, the lower
  // triangle only (query blocks of Tb rows, block [r0, r1) against keys [0, r1)) ...
  const int64_t Tb = attention_query_block(T);
  int64_t tri = 0;  // probabilities kept per head
  for (int64_t r0 = 0; r0 < T; r0 += Tb) tri += (std::min(T, r0 + Tb) - r0) * std::min(T, r0 + Tb);
  EXPECT_LT(tri, T * T * 2 / 3);
  EXPECT_EQ(term_bytes(p, "attention probabilities, lower triangle (B*H, T, <=T) bf16"), L * B * H * tri * 2);
  // ... the GELU input and output (c_proj's input), q, k, v and layer norm's x-hat in bf16 ...
  EXPECT_EQ(term_bytes(p, "c_fc output, GELU input (B, T, 4C) bf16"), L * B * T * 4 * C * 2);
  EXPECT_EQ(term_bytes(p, "GELU output, c_proj input (B, T, 4C) bf16"), L * B * T * 4 * C * 2);
  for (const char* t : {"q (B*H, T, D) bf16", "k (B*H, T, D) bf16", "v (B*H, T, D) bf16"})
    EXPECT_EQ(term_bytes(p, t), L * B * T * C * 2) << t;
  EXPECT_EQ(term_bytes(p, "ln_1 x-hat (B, T, C) bf16"), L * B * T * C * 2);
  // ... and no fp32 scores, nor the residual stream (only the block being computed holds its
  // own, until its second layer norm is done).
  EXPECT_EQ(term_bytes(p, "attention scores"), 0);
  EXPECT_LE(term_bytes(p, "residual after attention"), B * T * C * 4);

  // 32-true keeps the residual stream itself for layer norm (no x-hat), everything in fp32.
  const GptMemoryPrediction f = predict_gpt_memory(c, opts(PrecisionMode::true32, B, T));
  EXPECT_EQ(term_bytes(f, "attention probabilities, lower triangle (B*H, T, <=T) f32"), L * B * H * tri * 4);
  EXPECT_EQ(term_bytes(f, "ln_1 x-hat"), 0);
  EXPECT_EQ(term_bytes(f, "residual after attention (B, T, C) f32"), L * B * T * C * 4);
}

TEST(GptMemory, CheckpointingAnd16BitActivationsLowerThePeak) {
  const GptConfig c = GptConfig::preset("gpt-mini");
  const auto peak = [&](PrecisionMode m, bool ckpt) {
    return predict_gpt_memory(c, opts(m, 16, 256, ckpt)).peak_bytes;
  };
  const int64_t f32 = peak(PrecisionMode::true32, false);
  EXPECT_LT(peak(PrecisionMode::mixed_bf16, false), f32);
  EXPECT_LT(peak(PrecisionMode::true_bf16, false), peak(PrecisionMode::mixed_bf16, false));
  EXPECT_LT(peak(PrecisionMode::mixed_bf16, true), peak(PrecisionMode::mixed_bf16, false) * 6 / 10);
  // With checkpointing the peak moment is in backward (a block's recomputation or the head).
  const GptMemoryPrediction p = predict_gpt_memory(c, opts(PrecisionMode::mixed_bf16, 16, 256, true));
  EXPECT_NE(p.peak_moment.find("backward"), std::string::npos) << p.peak_moment;
}

TEST(GptMemory, Gpt2SmallFitsIn24GiBWithCheckpointing) {
  // The memory issue's goal: batch 8, seq 1024, bf16-mixed, checkpointing, within 24 GiB.
  const GptMemoryPrediction p =
      predict_gpt_memory(GptConfig::preset("gpt2-small"), opts(PrecisionMode::mixed_bf16, 8, 1024, true));
  EXPECT_EQ(p.parameters, 124439808);
  EXPECT_LT(p.peak_bytes, int64_t{24} << 30);
  EXPECT_GT(p.peak_bytes, int64_t{3} << 30);  // ~4 GiB: logits and their gradient (B, T, V) dominate
  EXPECT_GE(term_bytes(p, "logits (B, T, V) bf16"), 8 * 1024 * 50257 * 2);
  EXPECT_FALSE(p.terms.empty());
}

TEST(GptMemory, RefusesImpossibleRuns) {
  const GptConfig c = GptConfig::preset("gpt-nano");
  // The message names the option as the code spells it, and fields() lists it (the CLI turns it
  // into its flag).
  auto refuses = [&](GptMemoryOptions o, const std::string& says, std::vector<std::string> fields = {}) {
    try {
      predict_gpt_memory(c, o);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const ArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      if (!fields.empty()) {
        EXPECT_EQ(e.fields(), fields) << e.what();
      }
    }
  };
  GptMemoryOptions o = opts(PrecisionMode::true32, 2, 16);
  o.seq_len = c.block_size + 1;
  refuses(o, "seq_len 129 exceeds the model's block_size", {"seq_len"});
  o = opts(PrecisionMode::true32, 0, 16);
  refuses(o, "batch_size must be positive", {"batch_size"});
  o = opts(PrecisionMode::true32, int64_t{1} << 50, 16);
  refuses(o, "impossibly large");
  // An unknown optimizer cannot be named at all: the kind is an enum, parsed once.
  try {
    parse_optimizer_kind("lion");
    ADD_FAILURE() << "no error for optimizer 'lion'";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown optimizer 'lion' (valid: adamw, sgd)"), std::string::npos) << e.what();
  }
  o = opts(PrecisionMode::true32, 2, 16);
  o.grad_accum = 0;
  refuses(o, "grad_accum must be positive", {"grad_accum"});
  GptConfig bad = c;
  bad.n_head = 3;  // 128 is not divisible by 3
  EXPECT_THROW(predict_gpt_memory(bad, opts(PrecisionMode::true32, 2, 16)), ArgumentError);
}

// Measured runs (train()), one per kind of peak: 32-true at the start of backward, bf16-true with
// checkpointing in a block's recomputation, 16-mixed with the fp32 copies of its fp16 GEMM
// operands; bf16-mixed (the end of the forward pass) in the next test.
TEST(GptMemoryVsTracker, PeaksAgreeInRepresentativeRuns) {
  using gpt_memory_test::Case;
  for (const Case& c : {Case{PrecisionMode::true32, 8, 128, false, "adamw"},
                        Case{PrecisionMode::true_bf16, 4, 64, true, "sgd"},
                        Case{PrecisionMode::mixed16, 2, 32, true, "adamw"}})
    gpt_memory_test::expect_agree(gpt_memory_test::run(c), gpt_memory_test::name_of(c));
}

TEST(GptMemoryVsTracker, ActivationsDominateAndTheCheckWouldCatchAChangedProbabilityTerm) {
  const gpt_memory_test::Case c{PrecisionMode::mixed_bf16, 8, 128, false, "adamw"};
  const gpt_memory_test::Compared r = gpt_memory_test::run(c);
  gpt_memory_test::expect_agree(r, gpt_memory_test::name_of(c));
  const int64_t act = r.measured.peak[static_cast<size_t>(MemCategory::activations)];
  EXPECT_GT(act, r.measured.peak_total / 2) << "activations should dominate this configuration";
  int64_t probs = 0;
  for (const MemoryTerm& t : r.predicted.terms)
    if (t.name.rfind("attention probabilities", 0) == 0) probs += t.bytes;
  // If the attention op kept half as many probabilities (or half as many more) and the predictor
  // were not told, the activations check above would fail.
  EXPECT_GT(probs / 2, gpt_memory_test::allowed(act));
}

}  // namespace
}  // namespace mixtrain
