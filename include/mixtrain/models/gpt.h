// GPT (GPT-2 architecture): learned token and position embeddings, pre-LN transformer blocks,
// a final layer norm, and the output projection tied to the token embedding.
// Parameter names are GPT-2's (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...);
// Linear weights are stored (OUT, IN) as torch nn.Linear (Hugging Face's Conv1D stores IN, OUT).
//
// Dimension letters: B batch, T sequence (<= block_size), C n_embd, H n_head, L n_layer, V vocab.
#pragma once
#include <string>
#include <vector>

#include "mixtrain/models/model.h"
#include "mixtrain/nn/layers.h"

namespace mixtrain {

struct GptConfig {
  std::string name = "custom";
  int64_t vocab_size = 256;  // byte-level tokens by default
  int64_t block_size = 128;  // longest sequence (rows of wpe)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  float dropout = 0.f;
  float ln_eps = 1e-5f;

  // gpt-nano (L=4, C=128, H=4, T=128), gpt-mini (L=6, C=384, H=6, T=256),
  // gpt2-small (L=12, C=768, H=12, T=1024, V=50257). Throws ArgumentError listing the presets.
  static GptConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  // JSON text of an object with any of the fields above; missing fields keep the defaults.
  // ArgumentError naming `where` for malformed JSON, an unknown key or a wrongly typed value.
  static GptConfig from_json_text(const std::string& text, const std::string& where);
  static GptConfig from_json_file(const std::string& path);
  // A preset name or a path to a .json file.
  static GptConfig from_preset_or_file(const std::string& spec);
  // Throws ArgumentError for impossible configurations (C not divisible by H, sizes <= 0, ...).
  void validate() const;
  std::string to_json_text() const;  // {"name", "vocab_size", ..., "ln_eps"}
};

// True for the parameters Hugging Face's GPT-2 stores as Conv1D weights, (IN, OUT): attn.c_attn,
// attn.c_proj, mlp.c_fc and mlp.c_proj weights.
bool is_hf_conv1d_weight(const std::string& name);

class Gpt final : public Model {
 public:
  // Declares and allocates every parameter (dtype for values, grad_dtype for gradients, the values
  // charged to param_category) and initialises them as GPT-2 does from `seed`. storage.quant
  // stores quantizable_parameters() quantized instead (zero codes, scales 0: an inference model to
  // load a quantized file into; the tied head runs as a quantized linear of wte's codes).
  Gpt(const GptConfig& cfg, uint64_t seed, DType dtype = DType::f32, DType grad_dtype = DType::f32,
      MemCategory param_category = MemCategory::parameters, const StoreOptions& storage = {});

  const GptConfig& config() const { return cfg_; }
  std::string_view family() const override { return "gpt"; }
  ParameterStore& params() override { return store_; }
  const ParameterStore& params() const override { return store_; }
  std::string config_json() const override { return cfg_.to_json_text(); }
  // GPT-2's names (transformer.h.0.attn.c_attn.weight, ...) in Hugging Face's layout: the four
  // Conv1D weights of each block (is_hf_conv1d_weight) as (IN, OUT) views of our (OUT, IN).
  std::vector<NamedWeight> named_weights() const override;
  std::vector<std::string> quantizable_parameters() const override;
  bool gathers_sharded_parameters() const override { return true; }
  std::vector<std::vector<std::string>> fp8_linears() const override;

  // logits (B, T, V); loss scalar f32 (undefined without targets).
  using Output = ModelOutput;
  // idx, targets (B, T) i32. training enables dropout (seeded by dropout_seed).
  Output forward(const Tensor& idx, const Tensor* targets, bool training = false, uint64_t dropout_seed = 0);
  // forward(batch.inputs, &batch.targets, training, dropout_seed).
  ModelOutput forward_batch(const Batch& batch, bool training, uint64_t dropout_seed) override {
    return forward(batch.inputs, &batch.targets, training, dropout_seed);
  }
  // With the fused head (set_fused_lm_head): the logits a chunk of rows at a time (2 Mi logits),
  // each chunk's loss and top-1 taken before the next, so evaluation never holds the logits
  // (B, T, V) whole either; the same loss and predictions as the unfused evaluation. Otherwise
  // Model::evaluate_batch.
  EvalSums evaluate_batch(const Batch& batch) override;

  // Incremental decoding (models/generate.h): every layer's keys and values so far, (H, block_size,
  // D) each in the parameters' dtype, and how many positions they hold.
  struct KvCache {
    std::vector<Tensor> k, v;  // one per layer
    int64_t length = 0;
  };
  KvCache make_kv_cache() const;
  // Runs `tokens` at positions cache.length .. through the model without a graph, appending their
  // keys and values to the cache; returns the last token's logits (V) as floats. ShapeError when
  // the cache would pass block_size.
  std::vector<float> decode(const std::vector<int32_t>& tokens, KvCache& cache);

  // Activation checkpointing (autograd::checkpoint): each block keeps only its input for backward
  // and is recomputed there. Gradients are the same bit for bit; costs one more forward per block.
  void set_activation_checkpointing(bool on) override { checkpoint_blocks_ = on; }
  void set_fused_lm_head(bool on) override { fused_head_ = on; }
  // Each block's attention recomputes its probabilities in backward (autograd::AttentionProbs);
  // ArgumentError with dropout > 0 (attention dropout takes the unfused ops, which keep them).
  void set_attention_recompute(bool on) override;
  bool activation_checkpointing() const { return checkpoint_blocks_; }

  // GPT-2 initialisation: N(0, 0.02) for embeddings and Linear weights, N(0, 0.02/sqrt(2L)) for the
  // residual projections (attn.c_proj, mlp.c_proj), zero biases, unit layer-norm gains.
  void init_weights(uint64_t seed);

  // Training FLOPs per token: 6 * N (forward 2N + backward 4N for every parameter's multiply-add,
  // N excluding the position embedding, which is a lookup) + attention 12 * L * T * C
  // (QK^T and AV, forward and backward, causal mask not discounted) — PaLM appendix B's formula.
  double flops_per_token(int64_t T) const override;

 private:
  GptConfig cfg_;
  ParameterStore store_;
  nn::Embedding wte_, wpe_;
  std::vector<nn::Block> blocks_;
  nn::LayerNorm ln_f_;
  bool checkpoint_blocks_ = false;
  bool fused_head_ = false;   // training: autograd::lm_head_loss instead of the logits and cross_entropy
  bool hidden_only_ = false;  // forward returns ln_f's output as `logits` (evaluate_batch, fused head)
  // ZeRO-3's gather units (nn/gather.h): each block's parameters, and the rest (embeddings, ln_f).
  std::vector<FlatRanges> block_units_;
  FlatRanges rest_unit_;
};

}  // namespace mixtrain
