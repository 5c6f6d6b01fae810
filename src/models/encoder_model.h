// The encoder classifier behind models/encoder.h: BERT or DistilBERT (post-LN transformer layers,
// bidirectional attention with a key padding mask, exact GELU) with a sequence-classification head,
// parameters in one flat ParameterStore under Hugging Face's *ForSequenceClassification names.
// One exception to one-name-per-parameter: each layer's query, key and value projections are one
// fused (3C, C) Linear (one GEMM, and the heads read in place by split_heads); named_weights()
// gives them back as the three Hugging Face tensors (row views of the fused weight and bias).
//
// Dimension letters: B batch, T sequence, C hidden, H heads, D = C / H, I intermediate, L layers,
// K labels, V vocab.
#pragma once
#include <string>
#include <vector>

#include "mixtrain/models/encoder.h"
#include "mixtrain/nn/layers.h"
#include "models/encoder_config.h"

namespace mixtrain {

// One post-LN layer. BERT: attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
// intermediate.dense, output.{dense,LayerNorm}; DistilBERT: attention.{q_lin,k_lin,v_lin,out_lin},
// sa_layer_norm, ffn.lin1, ffn.lin2, output_layer_norm.
struct EncoderLayer {
  std::string prefix;       // "bert.encoder.layer.3" / "distilbert.transformer.layer.3"
  std::string attn_prefix;  // "....attention.self" / "....attention"
  std::string ffn_prefix;   // "....intermediate" / "....ffn"
  nn::Linear qkv;           // C -> 3C (query, key, value rows)
  nn::Linear attn_out;      // C -> C
  nn::LayerNorm ln_attn;
  nn::Linear ffn_in;   // C -> I
  nn::Linear ffn_out;  // I -> C
  nn::LayerNorm ln_out;
  int64_t heads = 1;
  bool drop_attn_out = true;  // BERT drops after attention.output.dense; DistilBERT does not
};

// A Hugging Face tensor as rows [r0, r1) of parameter `param` of the store.
struct EncoderSlot {
  std::string name;
  size_t param = 0;
  int64_t r0 = 0, r1 = 0;
};

class EncoderClassifier final : public Model {
 public:
  // Declares and allocates every parameter and initialises them as Hugging Face does
  // (init_weights(options.seed)). ArgumentError for fewer than 2 labels or a bad dropout.
  // storage.quant stores quantizable_parameters() quantized (an inference model to load into).
  EncoderClassifier(const EncoderConfig& cfg, const ClassifierOptions& options, DType dtype = DType::f32,
                    DType grad_dtype = DType::f32, MemCategory param_category = MemCategory::parameters,
                    const StoreOptions& storage = {});

  const EncoderConfig& config() const { return cfg_; }
  const ClassifierOptions& options() const { return opt_; }
  std::string_view family() const override {
    return cfg_.family == EncoderFamily::bert ? "bert" : "distilbert";
  }
  ParameterStore& params() override { return store_; }
  const ParameterStore& params() const override { return store_; }

  // batch.inputs (B, T) i32, targets (B) i32 (-1: padding row), token_types and attention_mask
  // (B, T) i32 or undefined. logits (B, K); loss the mean cross-entropy over rows with a target.
  ModelOutput forward_batch(const Batch& batch, bool training, uint64_t dropout_seed) override;
  // 6 N per token for the layers (forward 2N + backward 4N), the head's 6 N spread over the T
  // tokens of its sequence, plus attention 12 L T C (QK^T and AV, forward and backward); the
  // embeddings are lookups and not counted (PaLM appendix B's formula, as Gpt).
  double flops_per_token(int64_t T) const override;
  void set_activation_checkpointing(bool on) override { checkpoint_layers_ = on; }
  // Its attention (autograd::masked_attention) keeps nothing of size T x T either way.
  void set_attention_recompute(bool) override {}
  // config.json for the saved model: every field read, plus architectures, id2label, label2id,
  // num_labels and "mixtrain_pooling".
  std::string config_json() const override;
  std::vector<NamedWeight> named_weights() const override;  // Hugging Face names, views
  // The encoder layers' linear weights and the learned embedding tables (not the head, the
  // layer norms, the biases, nor DistilBERT's fixed sinusoidal positions).
  std::vector<std::string> quantizable_parameters() const override;
  bool gathers_sharded_parameters() const override { return true; }
  std::vector<std::vector<std::string>> fp8_linears() const override;
  std::vector<NamedWeight> named_grads() const;  // the same names, gradient views
  const std::vector<EncoderSlot>& slots() const { return slots_; }
  // Whether a Hugging Face name belongs to the classification head (classifier, pre_classifier,
  // BERT's pooler): a directory may lack these, then they keep init_weights' values.
  static bool is_head(const std::string& name);

  // Hugging Face's _init_weights: Linear weights and embeddings N(0, initializer_range) (the
  // padding row of the word embeddings 0), biases 0, LayerNorm gains 1; DistilBERT's sinusoidal
  // positions when the config asks for them. A distinct stream per parameter from `seed`.
  void init_weights(uint64_t seed);

 private:
  nn::Var layer_forward(const EncoderLayer& l, const nn::Var& x, const Tensor& key_mask,
                        nn::DropoutState& drop) const;
  void add_slot(const std::string& name, const std::string& param, int64_t r0 = 0, int64_t r1 = -1);

  EncoderConfig cfg_;
  ClassifierOptions opt_;
  ParameterStore store_;
  std::string prefix_;  // "bert" / "distilbert"
  nn::Embedding word_, pos_, type_;
  nn::LayerNorm emb_ln_;
  std::vector<EncoderLayer> layers_;
  nn::Linear pooler_;          // BERT, cls pooling: bert.pooler.dense
  nn::Linear pre_classifier_;  // DistilBERT
  nn::Linear classifier_;      // C -> K
  bool has_pooler_ = false;
  bool checkpoint_layers_ = false;
  std::vector<EncoderSlot> slots_;
  std::string head_site_;  // module name of the pooling (alloc sites)
  // ZeRO-3's gather units (nn/gather.h): each layer's parameters, and the rest (embeddings, head).
  std::vector<FlatRanges> layer_units_;
  FlatRanges rest_unit_;
};

}  // namespace mixtrain
