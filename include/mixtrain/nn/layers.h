// Layers: thin objects that bind named parameters of a ParameterStore to autograd Vars and apply
// the differentiable ops. Each layer runs under its name (tensor/alloc_site.h), so memory and
// numerics reports can say which module a tensor belongs to. Two phases: declare(store, ...) registers names
// and shapes before the store is finalized; bind(store) creates the Vars on the arena views afterwards.
//
// Dimension letters: B batch, T sequence, C channels, H heads, D = C / H, V vocab.
#pragma once
#include <string>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/nn/parameters.h"

namespace mixtrain::nn {

using autograd::Var;

// A parameter as an autograd leaf over its arena views (value and gradient).
Var bind_parameter(const ParameterStore& store, const std::string& name);

struct Linear {
  std::string prefix;  // e.g. "transformer.h.0.attn.c_attn"
  int64_t in = 0, out = 0;
  bool has_bias = true;
  Var weight;               // (OUT, IN); undefined when the store holds it quantized
  Var bias;                 // (OUT)
  QuantizedTensor qweight;  // (OUT, IN) codes, (OUT) scales: a quantized model's (inference only)
  void declare(ParameterStore& s, std::string name, int64_t in_features, int64_t out_features,
               bool bias_ = true);
  void bind(const ParameterStore& s);
  Var operator()(const Var& x) const;  // (..., IN) -> (..., OUT)
  // gelu_erf(operator()(x)); a quantized layer runs the GELU inside its GEMM's epilogue.
  Var gelu_erf_of(const Var& x) const;
  bool quantized() const { return qweight.codes.defined(); }
};

struct LayerNorm {
  std::string prefix;
  int64_t dim = 0;
  float eps = 1e-5f;
  Var weight;  // (C)
  Var bias;    // (C)
  void declare(ParameterStore& s, std::string name, int64_t channels, float eps_);
  void bind(const ParameterStore& s);
  Var operator()(const Var& x) const;
};

struct Embedding {
  std::string prefix;
  int64_t num = 0, dim = 0;
  int64_t padding_idx = -1;  // >= 0: this row gets no gradient (torch's padding_idx)
  Var weight;                // (NUM, C); undefined when the store holds it quantized
  QuantizedTensor qweight;   // (NUM, C) codes, (NUM) scales, dequantized at lookup (inference only)
  DType dtype = DType::f32;  // the store's parameter dtype: what a quantized lookup dequantizes into
  void declare(ParameterStore& s, std::string name, int64_t num_embeddings, int64_t channels);
  void bind(const ParameterStore& s);
  Var operator()(const Tensor& ids) const;  // (...) -> (..., C)
  bool quantized() const { return qweight.codes.defined(); }
  // out = x table^T (a tied output head, GPT's): the float GEMM, or the quantized linear.
  Var project(const Var& x) const;  // (..., C) -> (..., NUM)
};

// Dropout settings for one forward pass: the seed and a running element offset so every dropout
// site in the model draws from a distinct stream.
struct DropoutState {
  float p = 0.f;
  bool training = false;
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool active() const { return p != 0.f && training; }
  Var operator()(const Var& x);
  // For an op that applies this dropout to numel elements itself (autograd::masked_attention): the
  // p to pass (0 when inactive) and the stream offset it starts at, advanced as operator() does.
  struct Draw {
    float p;
    uint64_t offset;
  };
  Draw take(int64_t numel);
};

// Causal multi-head self-attention (GPT-2): qkv = c_attn(x); per head softmax(q k^T / sqrt(D)) v
// with a causal mask; c_proj over the merged heads.
struct CausalSelfAttention {
  std::string prefix;  // e.g. "transformer.h.0.attn"
  Linear c_attn;       // C -> 3C
  Linear c_proj;       // C -> C
  int64_t n_head = 1;
  // recompute: the probabilities are not kept for backward (autograd::attention_qkv); the
  // dropout path (attention dropout active) keeps them either way.
  autograd::AttentionProbs probs = autograd::AttentionProbs::keep;
  void declare(ParameterStore& s, const std::string& prefix, int64_t C, int64_t H);
  void bind(const ParameterStore& s);
  Var operator()(const Var& x, DropoutState& drop) const;  // (B, T, C) -> (B, T, C)
  // Incremental decoding (no dropout, no graph): x (1, Tn, C) holds the tokens at positions
  // pos .. pos+Tn-1; their keys and values are written into k_cache, v_cache (H, block, D) at
  // those positions, and each attends to the cached positions 0 .. its own.
  Var decode(const Var& x, Tensor& k_cache, Tensor& v_cache, int64_t pos) const;  // -> (1, Tn, C)
};

struct Mlp {
  std::string prefix;
  Linear c_fc;    // C -> 4C
  Linear c_proj;  // 4C -> C
  void declare(ParameterStore& s, const std::string& prefix, int64_t C);
  void bind(const ParameterStore& s);
  Var operator()(const Var& x, DropoutState& drop) const;  // (B, T, C) -> (B, T, C)
};

// Pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
struct Block {
  std::string prefix;  // e.g. "transformer.h.0"
  LayerNorm ln_1, ln_2;
  CausalSelfAttention attn;
  Mlp mlp;
  void declare(ParameterStore& s, const std::string& prefix, int64_t C, int64_t H, float eps);
  void bind(const ParameterStore& s);
  Var operator()(const Var& x, DropoutState& drop) const;
  Var decode(const Var& x, Tensor& k_cache, Tensor& v_cache, int64_t pos) const;  // see CausalSelfAttention
};

}  // namespace mixtrain::nn
