// The encoder classifier (models/encoder_model.h): parameters, Hugging Face initialisation, the
// forward pass of BERT / DistilBERT with a classification head, and the Hugging Face names.
#include "models/encoder_model.h"

#include <cmath>
#include <memory>

#include "mixtrain/core/error.h"
#include "mixtrain/nn/gather.h"
#include "tensor/alloc_site.h"

namespace mixtrain {

using autograd::Var;

namespace {

void check_i32(const Tensor& t, const Shape& want, const char* what) {
  if (!(t.shape() == want) || t.dtype() != DType::i32)
    throw ShapeError(std::string("encoder forward: ") + what + " must be i32 " + want.to_string() + ", got " +
                     t.to_string());
}
}  // namespace

EncoderClassifier::EncoderClassifier(const EncoderConfig& cfg, const ClassifierOptions& options, DType dtype,
                                     DType grad_dtype, MemCategory param_category,
                                     const StoreOptions& storage)
    : cfg_(cfg), opt_(options) {
  const int64_t K = static_cast<int64_t>(opt_.labels.size());
  if (K < 2) throw ArgumentError("encoder classifier: needs at least 2 labels, got " + std::to_string(K));
  if (!(opt_.dropout >= 0.f && opt_.dropout < 1.f))
    throw ArgumentError("encoder classifier: dropout must be in [0, 1), got " + std::to_string(opt_.dropout));
  const bool bert = cfg_.family == EncoderFamily::bert;
  const int64_t C = cfg_.hidden;
  prefix_ = bert ? "bert" : "distilbert";
  const std::string emb = prefix_ + ".embeddings";
  word_.declare(store_, emb + ".word_embeddings", cfg_.vocab_size, C);
  add_slot(word_.prefix + ".weight", word_.prefix + ".weight");
  if (cfg_.sinusoidal_positions) {  // fixed values: declared without weight decay, bound without a gradient
    pos_.prefix = emb + ".position_embeddings";
    pos_.num = cfg_.max_positions;
    pos_.dim = C;
    store_.declare(pos_.prefix + ".weight", {cfg_.max_positions, C}, /*weight_decay=*/false);
  } else {
    pos_.declare(store_, emb + ".position_embeddings", cfg_.max_positions, C);
  }
  add_slot(pos_.prefix + ".weight", pos_.prefix + ".weight");
  if (bert) {
    type_.declare(store_, emb + ".token_type_embeddings", cfg_.type_vocab_size, C);
    add_slot(type_.prefix + ".weight", type_.prefix + ".weight");
  }
  emb_ln_.declare(store_, emb + ".LayerNorm", C, cfg_.layer_norm_eps);
  add_slot(emb_ln_.prefix + ".weight", emb_ln_.prefix + ".weight");
  add_slot(emb_ln_.prefix + ".bias", emb_ln_.prefix + ".bias");
  layers_.resize(static_cast<size_t>(cfg_.layers));
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    EncoderLayer& l = layers_[static_cast<size_t>(i)];
    l.heads = cfg_.heads;
    l.drop_attn_out = bert;
    l.prefix = prefix_ + (bert ? ".encoder.layer." : ".transformer.layer.") + std::to_string(i);
    l.attn_prefix = l.prefix + (bert ? ".attention.self" : ".attention");
    l.ffn_prefix = l.prefix + (bert ? ".intermediate" : ".ffn");
    l.qkv.declare(store_, l.attn_prefix + ".qkv", C, 3 * C);
    l.attn_out.declare(store_, bert ? l.prefix + ".attention.output.dense" : l.prefix + ".attention.out_lin",
                       C, C);
    l.ln_attn.declare(store_, bert ? l.prefix + ".attention.output.LayerNorm" : l.prefix + ".sa_layer_norm",
                      C, cfg_.layer_norm_eps);
    l.ffn_in.declare(store_, bert ? l.prefix + ".intermediate.dense" : l.prefix + ".ffn.lin1", C,
                     cfg_.intermediate);
    l.ffn_out.declare(store_, bert ? l.prefix + ".output.dense" : l.prefix + ".ffn.lin2", cfg_.intermediate,
                      C);
    l.ln_out.declare(store_, bert ? l.prefix + ".output.LayerNorm" : l.prefix + ".output_layer_norm", C,
                     cfg_.layer_norm_eps);
    const char* qkv_names[3] = {bert ? "query" : "q_lin", bert ? "key" : "k_lin", bert ? "value" : "v_lin"};
    for (int w = 0; w < 3; ++w)
      for (const char* part : {".weight", ".bias"})
        add_slot(l.attn_prefix + "." + qkv_names[w] + part, l.qkv.prefix + part, w * C, (w + 1) * C);
    for (const nn::Linear* lin : {&l.attn_out, &l.ffn_in, &l.ffn_out})
      for (const char* part : {".weight", ".bias"}) add_slot(lin->prefix + part, lin->prefix + part);
    for (const nn::LayerNorm* ln : {&l.ln_attn, &l.ln_out})
      for (const char* part : {".weight", ".bias"}) add_slot(ln->prefix + part, ln->prefix + part);
  }
  // The head. Mean pooling has no pooler: BERT's pooler is neither declared, trained nor saved.
  has_pooler_ = bert && opt_.pooling == Pooling::cls;
  if (has_pooler_) pooler_.declare(store_, "bert.pooler.dense", C, C);
  if (!bert) pre_classifier_.declare(store_, "pre_classifier", C, C);
  classifier_.declare(store_, "classifier", C, K);
  for (const nn::Linear* lin : {&pooler_, &pre_classifier_, &classifier_})
    if (!lin->prefix.empty())
      for (const char* part : {".weight", ".bias"}) add_slot(lin->prefix + part, lin->prefix + part);
  head_site_ = opt_.pooling == Pooling::cls ? "pooling.cls" : "pooling.mean";

  QuantizedLayout layout;
  if (storage.quant != QuantScheme::none) {
    layout.scheme = storage.quant;
    for (const std::string& n : quantizable_parameters()) layout.names.insert(n);
  }
  store_.finalize(dtype, grad_dtype, param_category, layout, storage.gradients && layout.empty());
  word_.bind(store_);
  word_.padding_idx = cfg_.pad_token_id;
  if (cfg_.sinusoidal_positions) {  // fixed (as Hugging Face's requires_grad = False): no gradient
    pos_.weight = Var(store_.param(pos_.prefix + ".weight"));
  } else {
    pos_.bind(store_);
  }
  if (bert) type_.bind(store_);
  emb_ln_.bind(store_);
  for (EncoderLayer& l : layers_)
    for (auto* lin : {&l.qkv, &l.attn_out, &l.ffn_in, &l.ffn_out}) lin->bind(store_);
  for (EncoderLayer& l : layers_) {
    l.ln_attn.bind(store_);
    l.ln_out.bind(store_);
  }
  if (has_pooler_) pooler_.bind(store_);
  if (!bert) pre_classifier_.bind(store_);
  classifier_.bind(store_);
  if (layout.empty()) {
    for (const EncoderLayer& l : layers_) layer_units_.push_back(nn::unit_of(store_, {l.prefix + "."}));
    rest_unit_ = nn::rest_of(store_, layer_units_);
  }
  init_weights(opt_.seed);
}

void EncoderClassifier::add_slot(const std::string& name, const std::string& param, int64_t r0, int64_t r1) {
  slots_.push_back({name, store_.index(param), r0, r1 < 0 ? store_.info(param).shape[0] : r1});
}

bool EncoderClassifier::is_head(const std::string& name) {
  return name.starts_with("classifier.") || name.starts_with("pre_classifier.") ||
         name.starts_with("bert.pooler.");
}

void EncoderClassifier::init_weights(uint64_t seed) {
  const auto& infos = store_.infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    const std::string& n = infos[i].name;
    if (store_.is_quantized(i)) continue;  // codes come from the quantized file
    Tensor p = store_.param(i);
    if (n.find("LayerNorm") != std::string::npos || n.find("layer_norm") != std::string::npos) {
      if (n.ends_with(".bias"))
        p.zero();
      else
        p.fill(1.0);
    } else if (n.ends_with(".bias")) {
      p.zero();
    } else {
      p.copy_from(Tensor::randn(p.shape(), DType::f32, seed * 1000003ULL + i, 0.f, cfg_.initializer_range,
                                MemCategory::workspace));
    }
  }
  if (word_.padding_idx >= 0 && !word_.quantized())
    store_.param(word_.prefix + ".weight").select(0, word_.padding_idx).zero();
  if (cfg_.sinusoidal_positions) {
    // create_sinusoidal_embeddings: angle(pos, j) = pos / 10000^(2 (j / 2) / C); sin on even j, cos on odd.
    const int64_t P = cfg_.max_positions, C = cfg_.hidden;
    std::vector<double> v(static_cast<size_t>(P * C));
    for (int64_t p = 0; p < P; ++p)
      for (int64_t j = 0; j < C; ++j) {
        const double a = static_cast<double>(p) /
                         std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / static_cast<double>(C));
        v[static_cast<size_t>(p * C + j)] = j % 2 == 0 ? std::sin(a) : std::cos(a);
      }
    store_.param(pos_.prefix + ".weight")
        .copy_from(Tensor::from_vector(v, {P, C}, DType::f32, MemCategory::workspace));
  }
  store_.flat_params().storage()->bump_version();
}

Var EncoderClassifier::layer_forward(const EncoderLayer& l, const Var& x, const Tensor& key_mask,
                                     nn::DropoutState& drop) const {
  using namespace autograd;
  const ScopedModule site(l.prefix);
  const int64_t B = x.size(0), D = cfg_.hidden / l.heads;
  Var ctx;
  {
    const ScopedModule attn_site(l.attn_prefix);
    Var qkv = l.qkv(x);  // (B, T, 3C)
    // dropout(masked_softmax(q k^T / sqrt(D))) v of every head of qkv in one op that keeps nothing
    // (B*H, T, T) for backward (and, where the fused kernel runs, reads the heads in place); the
    // dropout on the probabilities (Hugging Face's attention dropout) draws the stream positions a
    // separate dropout op would.
    const int64_t T = x.size(1);
    const nn::DropoutState::Draw d = drop.take(B * l.heads * T * T);  // (B*H, T, T) probabilities
    ctx =
        masked_attention_qkv(qkv, key_mask, l.heads, 1.0f / std::sqrt(static_cast<float>(D)), d.p, drop.seed,
                             d.offset);  // (B, T, C)
  }
  Var a = l.attn_out(ctx);  // (B, T, C)
  if (l.drop_attn_out) a = drop(a);
  Var h = l.ln_attn(add(a, x));  // (B, T, C)
  Var f;
  {
    const ScopedModule ffn_site(l.ffn_prefix);
    f = l.ffn_in.gelu_erf_of(h);  // (B, T, I): GELU(ffn_in(h))
  }
  f = drop(l.ffn_out(f));  // (B, T, C)
  return l.ln_out(add(f, h));
}

ModelOutput EncoderClassifier::forward_batch(const Batch& batch, bool training, uint64_t dropout_seed) {
  using namespace autograd;
  const Tensor& ids = batch.inputs;
  if (ids.dim() != 2 || ids.dtype() != DType::i32)
    throw ShapeError("encoder forward: inputs must be i32 (B, T), got " + ids.to_string());
  const int64_t B = ids.size(0), T = ids.size(1);
  if (T < 1 || T > cfg_.max_positions)
    throw ShapeError("encoder forward: sequence length " + std::to_string(T) + " is outside [1, " +
                     std::to_string(cfg_.max_positions) + "] (max_position_embeddings)");
  const bool meta = ids.is_meta();
  // Padding mask (B, T): given, or all real.
  Tensor key_mask = batch.attention_mask.defined()
                        ? batch.attention_mask.contiguous()
                        : Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(B * T), 1), {B, T});
  check_i32(key_mask, {B, T}, "attention_mask");
  nn::DropoutState drop{opt_.dropout, training, dropout_seed, 0};

  std::vector<int32_t> pos(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  // ZeRO-3 (nn/gather.h): the embeddings and the head gathered for the pass, each layer around its own.
  const nn::GatherScope rest(store_, rest_unit_);
  Var x = add(word_(ids), pos_(Tensor::from_ints(pos, {B, T})));  // (B, T, C)
  if (cfg_.family == EncoderFamily::bert) {
    Tensor types = batch.token_types.defined()
                       ? batch.token_types
                       : Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(B * T), 0), {B, T});
    check_i32(types, {B, T}, "token_types");
    if (!meta) {
      const std::vector<int32_t> tv = types.to_ints();
      for (size_t i = 0; i < tv.size(); ++i)
        if (tv[i] < 0 || tv[i] >= cfg_.type_vocab_size)
          throw ArgumentError("encoder forward: token_types value " + std::to_string(tv[i]) + " at row " +
                              std::to_string(static_cast<int64_t>(i) / T) +
                              " is outside [0, type_vocab_size " + std::to_string(cfg_.type_vocab_size) +
                              ")");
    }
    x = add(x, type_(types));
  }
  x = drop(emb_ln_(x));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const EncoderLayer& l = layers_[i];
    const FlatRanges& unit = i < layer_units_.size() ? layer_units_[i] : rest_unit_;
    if (!checkpoint_layers_ || !grad_enabled()) {
      x = nn::gathered(
          store_, unit, [&](const Var& in) { return layer_forward(l, in, key_mask, drop); }, x);
      continue;
    }
    // As Gpt: the recomputation draws the same dropout masks from this layer's offset.
    const nn::DropoutState at_layer = drop;
    auto offset_after = std::make_shared<uint64_t>(drop.offset);
    x = nn::gathered(
        store_, unit,
        [&](const Var& x_in) {
          return checkpoint(
              [this, &l, key_mask, at_layer, offset_after](const Var& in) {
                nn::DropoutState d = at_layer;
                Var y = layer_forward(l, in, key_mask, d);
                *offset_after = d.offset;
                return y;
              },
              x_in);
        },
        x);
    drop.offset = *offset_after;
  }

  // Pooling as a batched matmul with a constant weight w (B, 1, T): [CLS] is w = e_0 (exact: 1 x
  // plus 0 times the rest), mean is w[t] = mask[t] / (real tokens) (a row with none: 0).
  Var pooled;
  {
    const ScopedModule site(head_site_);
    std::vector<float> w(static_cast<size_t>(B * T), 0.f);
    if (!meta) {
      const std::vector<int32_t> m = key_mask.to_ints();
      for (int64_t b = 0; b < B; ++b) {
        if (opt_.pooling == Pooling::cls) {
          w[static_cast<size_t>(b * T)] = 1.f;
          continue;
        }
        int64_t n = 0;
        for (int64_t t = 0; t < T; ++t) n += m[static_cast<size_t>(b * T + t)] != 0;
        for (int64_t t = 0; t < T; ++t)
          if (n > 0 && m[static_cast<size_t>(b * T + t)] != 0)
            w[static_cast<size_t>(b * T + t)] = 1.f / static_cast<float>(n);
      }
    }
    const Var weights(Tensor::from_floats(w, {B, 1, T}, x.dtype()));
    pooled = reshape(matmul(weights, x), {B, cfg_.hidden});  // (B, 1, T) @ (B, T, C) -> (B, C)
  }
  if (has_pooler_) pooled = autograd::tanh(pooler_(pooled));  // BERT: pooler dense + tanh
  if (cfg_.family == EncoderFamily::distilbert) pooled = relu(pre_classifier_(pooled));  // DistilBERT head
  Var logits = classifier_(drop(pooled));                                                // (B, K)
  ModelOutput out{logits, Var()};
  if (batch.targets.defined()) {
    check_i32(batch.targets, {B}, "targets");
    out.loss = cross_entropy(logits, batch.targets);
  }
  return out;
}

double EncoderClassifier::flops_per_token(int64_t T) const {
  double layers = 0, head = 0;
  for (const auto& info : store_.infos()) {
    if (info.name.find(".embeddings.") != std::string::npos) continue;  // lookups
    (is_head(info.name) ? head : layers) += static_cast<double>(info.numel);
  }
  const double t = static_cast<double>(std::max<int64_t>(T, 1));
  return 6.0 * layers + 6.0 * head / t +
         12.0 * static_cast<double>(cfg_.layers) * t * static_cast<double>(cfg_.hidden);
}

std::string EncoderClassifier::config_json() const {
  nlohmann::json j = cfg_.raw;
  const bool bert = cfg_.family == EncoderFamily::bert;
  j["model_type"] = bert ? "bert" : "distilbert";
  j["architectures"] = {bert ? "BertForSequenceClassification" : "DistilBertForSequenceClassification"};
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (size_t i = 0; i < opt_.labels.size(); ++i) {
    id2label[std::to_string(i)] = opt_.labels[i];
    label2id[opt_.labels[i]] = i;
  }
  j["id2label"] = id2label;
  j["label2id"] = label2id;
  j["num_labels"] = opt_.labels.size();
  j["mixtrain_pooling"] = opt_.pooling == Pooling::cls ? "cls" : "mean";
  return j.dump(2);
}

EncoderInfo encoder_info(const Model& model) {
  const auto* enc = dynamic_cast<const EncoderClassifier*>(&model);
  if (!enc)
    throw ArgumentError("encoder_info: model family '" + std::string(model.family()) +
                        "' is not an encoder classifier");
  const EncoderConfig& c = enc->config();
  EncoderInfo i;
  i.family = std::string(enc->family());
  i.vocab_size = c.vocab_size;
  i.max_positions = c.max_positions;
  i.hidden = c.hidden;
  i.layers = c.layers;
  i.heads = c.heads;
  i.labels = enc->options().labels;
  i.pooling = enc->options().pooling;
  return i;
}

std::vector<NamedWeight> EncoderClassifier::named_weights() const {
  std::vector<NamedWeight> w;
  for (const EncoderSlot& s : slots_) {
    if (store_.is_quantized(s.param)) {
      const QuantizedTensor q = store_.quantized(s.param);
      w.push_back({s.name, Tensor(), q.codes.slice(0, s.r0, s.r1),
                   q.scale.slice(0, s.r0, s.r1).reshape({s.r1 - s.r0, 1})});
      continue;
    }
    w.push_back({s.name, store_.param(s.param).slice(0, s.r0, s.r1), Tensor(), Tensor()});
  }
  return w;
}

std::vector<std::vector<std::string>> EncoderClassifier::fp8_linears() const {
  std::vector<std::vector<std::string>> v;
  for (const EncoderLayer& l : layers_) {
    v.emplace_back();
    for (const nn::Linear* lin : {&l.qkv, &l.attn_out, &l.ffn_in, &l.ffn_out})
      v.back().push_back(lin->prefix);
  }
  return v;
}

std::vector<std::string> EncoderClassifier::quantizable_parameters() const {
  std::vector<std::string> n{word_.prefix + ".weight"};
  if (!cfg_.sinusoidal_positions) n.push_back(pos_.prefix + ".weight");
  if (cfg_.family == EncoderFamily::bert) n.push_back(type_.prefix + ".weight");
  for (const EncoderLayer& l : layers_)
    for (const nn::Linear* lin : {&l.qkv, &l.attn_out, &l.ffn_in, &l.ffn_out})
      n.push_back(lin->prefix + ".weight");
  return n;
}

std::vector<NamedWeight> EncoderClassifier::named_grads() const {
  std::vector<NamedWeight> w;
  for (const EncoderSlot& s : slots_)
    w.push_back({s.name, store_.grad(s.param).slice(0, s.r0, s.r1), Tensor(), Tensor()});
  return w;
}

}  // namespace mixtrain
