// Layers: parameter declaration/binding and forward composition.
#include "mixtrain/nn/layers.h"

#include <cmath>
#include <memory>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/autograd/fp8_linear.h"
#include "tensor/alloc_site.h"

namespace mixtrain::nn {

Var bind_parameter(const ParameterStore& store, const std::string& name) {
  const size_t i = store.index(name);
  if (!store.has_gradients()) return Var(store.param(i));  // an inference model's: a plain value
  return Var::parameter(store.param(i), store.grad(i));
}

void Linear::declare(ParameterStore& s, std::string name, int64_t in_features, int64_t out_features,
                     bool bias_) {
  prefix = std::move(name);
  in = in_features;
  out = out_features;
  has_bias = bias_;
  s.declare(prefix + ".weight", {out, in}, /*weight_decay=*/true);
  if (has_bias) s.declare(prefix + ".bias", {out}, /*weight_decay=*/false);
}

void Linear::bind(const ParameterStore& s) {
  if (s.is_quantized(prefix + ".weight"))
    qweight = s.quantized(prefix + ".weight");
  else
    weight = bind_parameter(s, prefix + ".weight");
  if (has_bias) bias = bind_parameter(s, prefix + ".bias");
}

Var Linear::operator()(const Var& x) const {
  const ScopedModule site(prefix);
  if (quantized()) return autograd::quantized_linear(x, qweight, bias);
  if (const std::shared_ptr<autograd::Fp8Site> s = fp8_site_for(prefix))
    return autograd::fp8_linear(x, weight, bias, s);
  return autograd::linear(x, weight, bias);
}

Var Linear::gelu_erf_of(const Var& x) const {
  if (!quantized()) return autograd::gelu_erf((*this)(x));
  const ScopedModule site(prefix);
  return autograd::quantized_linear(x, qweight, bias, /*gelu_erf=*/true);
}

void LayerNorm::declare(ParameterStore& s, std::string name, int64_t channels, float eps_) {
  prefix = std::move(name);
  dim = channels;
  eps = eps_;
  s.declare(prefix + ".weight", {dim}, false);
  s.declare(prefix + ".bias", {dim}, false);
}

void LayerNorm::bind(const ParameterStore& s) {
  weight = bind_parameter(s, prefix + ".weight");
  bias = bind_parameter(s, prefix + ".bias");
}

Var LayerNorm::operator()(const Var& x) const {
  const ScopedModule site(prefix);
  return autograd::layer_norm(x, weight, bias, eps);
}

void Embedding::declare(ParameterStore& s, std::string name, int64_t num_embeddings, int64_t channels) {
  prefix = std::move(name);
  num = num_embeddings;
  dim = channels;
  s.declare(prefix + ".weight", {num, dim}, true);
}

void Embedding::bind(const ParameterStore& s) {
  dtype = s.flat_params().dtype();
  if (s.is_quantized(prefix + ".weight"))
    qweight = s.quantized(prefix + ".weight");
  else
    weight = bind_parameter(s, prefix + ".weight");
}

Var Embedding::operator()(const Tensor& ids) const {
  const ScopedModule site(prefix);
  if (quantized()) return autograd::quantized_embedding(qweight, ids, dtype);
  return autograd::embedding(weight, ids, padding_idx);
}

Var Embedding::project(const Var& x) const {
  if (quantized()) return autograd::quantized_linear(x, qweight, Var());
  return autograd::matmul(x, weight, false, true);
}

Var DropoutState::operator()(const Var& x) {
  if (!active()) return x;
  const Draw d = take(x.value().numel());
  return autograd::dropout(x, d.p, seed, d.offset, training);
}

DropoutState::Draw DropoutState::take(int64_t numel) {
  if (!active()) return {0.f, offset};
  const Draw d{p, offset};
  offset += static_cast<uint64_t>(numel);
  return d;
}

void CausalSelfAttention::declare(ParameterStore& s, const std::string& name, int64_t C, int64_t H) {
  prefix = name;
  n_head = H;
  c_attn.declare(s, prefix + ".c_attn", C, 3 * C);
  c_proj.declare(s, prefix + ".c_proj", C, C);
}

void CausalSelfAttention::bind(const ParameterStore& s) {
  c_attn.bind(s);
  c_proj.bind(s);
}

Var CausalSelfAttention::operator()(const Var& x, DropoutState& drop) const {
  using namespace autograd;
  const ScopedModule site(prefix);
  const int64_t B = x.size(0), C = x.size(2), D = C / n_head;
  Var qkv = c_attn(x);  // (B, T, 3C)
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Var y;
  if (drop.active()) {                    // dropout on the probabilities: the unfused graph
    Var q = split_heads(qkv, 0, n_head);  // (B*H, T, D)
    Var k = split_heads(qkv, 1, n_head);  // (B*H, T, D)
    Var v = split_heads(qkv, 2, n_head);  // (B*H, T, D)
    Var att = matmul(q, k, false, true);  // (B*H, T, T) = q k^T
    att = drop(causal_softmax(att, scale));
    y = merge_heads(matmul(att, v), B);  // (B*H, T, D) -> (B, T, C)
  } else {
    y = attention_qkv(qkv, n_head, scale, probs);  // (B, T, C)
  }
  return drop(c_proj(y));
}

Var CausalSelfAttention::decode(const Var& x, Tensor& k_cache, Tensor& v_cache, int64_t pos) const {
  using namespace autograd;
  const int64_t Tn = x.size(1), C = x.size(2), D = C / n_head;
  Var qkv = c_attn(x);                  // (1, Tn, 3C)
  Var q = split_heads(qkv, 0, n_head);  // (H, Tn, D)
  k_cache.slice(1, pos, pos + Tn).copy_from(split_heads(qkv, 1, n_head).value());
  v_cache.slice(1, pos, pos + Tn).copy_from(split_heads(qkv, 2, n_head).value());
  const Var k(k_cache.slice(1, 0, pos + Tn).contiguous());  // (H, pos+Tn, D)
  const Var v(v_cache.slice(1, 0, pos + Tn).contiguous());  // (H, pos+Tn, D)
  // Query row i (position pos+i) sees the keys 0 .. pos+i: causal_softmax's offset Tk - Tq.
  Var att =
      causal_softmax(matmul(q, k, false, true), 1.0f / std::sqrt(static_cast<float>(D)));  // (H, Tn, pos+Tn)
  return c_proj(merge_heads(matmul(att, v), 1));  // (H, Tn, D) -> (1, Tn, C)
}

Var Block::decode(const Var& x, Tensor& k_cache, Tensor& v_cache, int64_t pos) const {
  Var h = autograd::add(x, attn.decode(ln_1(x), k_cache, v_cache, pos));
  DropoutState none;
  return autograd::add(h, mlp(ln_2(h), none));
}

void Mlp::declare(ParameterStore& s, const std::string& name, int64_t C) {
  prefix = name;
  c_fc.declare(s, prefix + ".c_fc", C, 4 * C);
  c_proj.declare(s, prefix + ".c_proj", 4 * C, C);
}

void Mlp::bind(const ParameterStore& s) {
  c_fc.bind(s);
  c_proj.bind(s);
}

Var Mlp::operator()(const Var& x, DropoutState& drop) const {
  const ScopedModule site(prefix);
  return drop(c_proj(autograd::gelu(c_fc(x))));  // (B, T, C) -> (B, T, 4C) -> (B, T, C)
}

void Block::declare(ParameterStore& s, const std::string& name, int64_t C, int64_t H, float eps) {
  prefix = name;
  ln_1.declare(s, prefix + ".ln_1", C, eps);
  attn.declare(s, prefix + ".attn", C, H);
  ln_2.declare(s, prefix + ".ln_2", C, eps);
  mlp.declare(s, prefix + ".mlp", C);
}

void Block::bind(const ParameterStore& s) {
  ln_1.bind(s);
  attn.bind(s);
  ln_2.bind(s);
  mlp.bind(s);
}

Var Block::operator()(const Var& x, DropoutState& drop) const {
  const ScopedModule site(prefix);
  Var h = autograd::add(x, attn(ln_1(x), drop));
  return autograd::add(h, mlp(ln_2(h), drop));
}

}  // namespace mixtrain::nn
