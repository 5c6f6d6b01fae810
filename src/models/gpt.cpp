// GPT: configuration, presets, parameters, initialisation and the forward pass.
#include "mixtrain/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/nn/gather.h"
#include "models/gpt_config_json.h"

namespace mixtrain {

std::vector<std::string> GptConfig::preset_names() { return {"gpt-nano", "gpt-mini", "gpt2-small"}; }

GptConfig GptConfig::preset(const std::string& name) {
  GptConfig c;
  c.name = name;
  if (name == "gpt-nano") {
    c.n_layer = 4, c.n_embd = 128, c.n_head = 4, c.block_size = 128;
  } else if (name == "gpt-mini") {
    c.n_layer = 6, c.n_embd = 384, c.n_head = 6, c.block_size = 256;
  } else if (name == "gpt2-small") {
    c.n_layer = 12, c.n_embd = 768, c.n_head = 12, c.block_size = 1024, c.vocab_size = 50257;
  } else {
    std::string list;
    for (const auto& p : preset_names()) list += (list.empty() ? "" : ", ") + p;
    throw ArgumentError("unknown model preset '" + name + "' (valid: " + list + ", or a .json config file)");
  }
  return c;
}

namespace {
// A value quoted in a message; containers only by kind (dumping a hostile, deeply nested value
// would recurse without bound).
std::string excerpt(const nlohmann::json& v) {
  if (v.is_structured()) return v.is_array() ? "an array" : "an object";
  const std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}
}  // namespace

GptConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw ArgumentError(where + ": model config must be a JSON object");
  GptConfig c;
  c.name = where;
  const char* int_keys[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd"};
  int64_t* int_fields[] = {&c.vocab_size, &c.block_size, &c.n_layer, &c.n_head, &c.n_embd};
  for (auto& [key, value] : j.items()) {
    bool known = false;
    for (size_t i = 0; i < 5; ++i)
      if (key == int_keys[i]) {
        if (!value.is_number_integer())
          throw ArgumentError(where + ": '" + key + "' must be an integer, got " + excerpt(value));
        *int_fields[i] = value.get<int64_t>();
        known = true;
      }
    if (key == "dropout" || key == "ln_eps") {
      if (!value.is_number())
        throw ArgumentError(where + ": '" + key + "' must be a number, got " + excerpt(value));
      (key == "dropout" ? c.dropout : c.ln_eps) = value.get<float>();
      known = true;
    }
    if (key == "name") {
      if (!value.is_string()) throw ArgumentError(where + ": 'name' must be a string");
      c.name = value.get<std::string>();
      for (unsigned char ch : c.name)  // it appears in messages, which must stay one line
        if (ch < 0x20 || ch == 0x7F) throw ArgumentError(where + ": 'name' holds a control character");
      known = true;
    }
    if (!known) throw ArgumentError(where + ": unknown model config key " + excerpt(nlohmann::json(key)));
  }
  c.validate();
  return c;
}

GptConfig GptConfig::from_json_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw IoError("cannot read model config " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError("model config " + path + " is not valid JSON: " + e.what());
  }
  return gpt_config_from_json(j, path);
}

GptConfig GptConfig::from_preset_or_file(const std::string& spec) {
  if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json") return from_json_file(spec);
  return preset(spec);
}

void GptConfig::validate() const {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0)
      throw ArgumentError("model config " + name + ": " + what + " must be positive, got " +
                          std::to_string(v));
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  if (n_embd % n_head != 0)
    throw ArgumentError("model config " + name + ": n_embd " + std::to_string(n_embd) +
                        " is not divisible by n_head " + std::to_string(n_head));
  if (!(dropout >= 0.f && dropout < 1.f))
    throw ArgumentError("model config " + name + ": dropout must be in [0, 1), got " +
                        std::to_string(dropout));
  if (!(ln_eps > 0.f)) throw ArgumentError("model config " + name + ": ln_eps must be positive");
  if (vocab_size > (1LL << 31) || n_embd > (1LL << 20) || block_size > (1LL << 20) || n_layer > 4096)
    throw ArgumentError("model config " + name + ": sizes are impossibly large");
}

nlohmann::json gpt_config_to_json(const GptConfig& c) {
  return {{"name", c.name},       {"vocab_size", c.vocab_size}, {"block_size", c.block_size},
          {"n_layer", c.n_layer}, {"n_head", c.n_head},         {"n_embd", c.n_embd},
          {"dropout", c.dropout}, {"ln_eps", c.ln_eps}};
}

std::string GptConfig::to_json_text() const { return gpt_config_to_json(*this).dump(); }

GptConfig GptConfig::from_json_text(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ArgumentError(where + ": not valid JSON (" + e.what() + ")");
  }
  return gpt_config_from_json(j, where);
}

Gpt::Gpt(const GptConfig& cfg, uint64_t seed, DType dtype, DType grad_dtype, MemCategory param_category,
         const StoreOptions& storage)
    : cfg_(cfg) {
  cfg_.validate();
  const int64_t C = cfg_.n_embd;
  wte_.declare(store_, "transformer.wte", cfg_.vocab_size, C);
  wpe_.declare(store_, "transformer.wpe", cfg_.block_size, C);
  blocks_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int64_t l = 0; l < cfg_.n_layer; ++l)
    blocks_[static_cast<size_t>(l)].declare(store_, "transformer.h." + std::to_string(l), C, cfg_.n_head,
                                            cfg_.ln_eps);
  ln_f_.declare(store_, "transformer.ln_f", C, cfg_.ln_eps);
  QuantizedLayout layout;
  if (storage.quant != QuantScheme::none) {
    layout.scheme = storage.quant;
    for (const std::string& n : quantizable_parameters()) layout.names.insert(n);
  }
  store_.finalize(dtype, grad_dtype, param_category, layout, storage.gradients && layout.empty());
  wte_.bind(store_);
  wpe_.bind(store_);
  for (auto& b : blocks_) b.bind(store_);
  ln_f_.bind(store_);
  if (layout.empty()) {
    for (const nn::Block& b : blocks_) block_units_.push_back(nn::unit_of(store_, {b.prefix + "."}));
    rest_unit_ = nn::rest_of(store_, block_units_);
  }
  init_weights(seed);
}

void Gpt::set_attention_recompute(bool on) {
  if (on && cfg_.dropout > 0.f)
    throw ArgumentError({"recompute_attention"}, "recompute_attention: attention dropout (dropout " +
                                                     std::to_string(cfg_.dropout) +
                                                     ") keeps the probabilities; use dropout 0");
  for (nn::Block& b : blocks_)
    b.attn.probs = on ? autograd::AttentionProbs::recompute : autograd::AttentionProbs::keep;
}

void Gpt::init_weights(uint64_t seed) {
  const float std_resid = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg_.n_layer));
  const auto& infos = store_.infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    const std::string& n = infos[i].name;
    if (store_.is_quantized(i)) continue;  // codes come from the quantized file
    Tensor p = store_.param(i);
    const bool is_bias = n.size() > 5 && n.substr(n.size() - 5) == ".bias";
    const bool is_ln = n.find(".ln_") != std::string::npos;
    if (is_ln && !is_bias) {
      p.fill(1.0);
    } else if (is_bias) {
      p.zero();
    } else {
      const bool resid = n.find(".c_proj.weight") != std::string::npos;
      // A distinct stream per parameter: the seed mixed with the parameter's index.
      p.copy_from(Tensor::randn(p.shape(), DType::f32, seed * 1000003ULL + i, 0.f, resid ? std_resid : 0.02f,
                                MemCategory::workspace));
    }
  }
}

double Gpt::flops_per_token(int64_t T) const {
  const double n = static_cast<double>(num_parameters() - cfg_.block_size * cfg_.n_embd);
  return 6.0 * n +
         12.0 * static_cast<double>(cfg_.n_layer) * static_cast<double>(T) * static_cast<double>(cfg_.n_embd);
}

Gpt::KvCache Gpt::make_kv_cache() const {
  KvCache c;
  const int64_t H = cfg_.n_head, D = cfg_.n_embd / cfg_.n_head;
  const DType dt = wte_.dtype;
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    c.k.push_back(Tensor::zeros({H, cfg_.block_size, D}, dt, MemCategory::activations));
    c.v.push_back(Tensor::zeros({H, cfg_.block_size, D}, dt, MemCategory::activations));
  }
  return c;
}

std::vector<float> Gpt::decode(const std::vector<int32_t>& tokens, KvCache& cache) {
  using namespace autograd;
  const int64_t Tn = static_cast<int64_t>(tokens.size()), pos = cache.length;
  if (Tn < 1 || pos + Tn > cfg_.block_size)
    throw ShapeError("gpt decode: positions " + std::to_string(pos) + ".." + std::to_string(pos + Tn - 1) +
                     " are outside block_size " + std::to_string(cfg_.block_size));
  NoGradGuard no_grad;
  const nn::GatherScope rest(store_, rest_unit_);  // ZeRO-3: nothing otherwise
  std::vector<int32_t> p(static_cast<size_t>(Tn));
  for (int64_t i = 0; i < Tn; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(pos + i);
  Var x = add(wte_(Tensor::from_ints(tokens, {1, Tn})), wpe_(Tensor::from_ints(p, {1, Tn})));  // (1, Tn, C)
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const nn::GatherScope block(store_, l < block_units_.size() ? block_units_[l] : rest_unit_);
    x = blocks_[l].decode(x, cache.k[l], cache.v[l], pos);
  }
  cache.length = pos + Tn;
  x = ln_f_(x);
  const Var logits = wte_.project(x);  // (1, Tn, V)
  return logits.value().select(1, Tn - 1).contiguous().to_floats();
}

Gpt::Output Gpt::forward(const Tensor& idx, const Tensor* targets, bool training, uint64_t dropout_seed) {
  using namespace autograd;
  if (idx.dim() != 2) throw ShapeError("gpt forward: idx must be (B, T), got " + idx.to_string());
  idx.check_dtype(DType::i32, "gpt forward: idx");
  const int64_t B = idx.size(0), T = idx.size(1);
  if (T > cfg_.block_size)
    throw ShapeError("gpt forward: sequence length " + std::to_string(T) + " exceeds block_size " +
                     std::to_string(cfg_.block_size));
  nn::DropoutState drop{cfg_.dropout, training, dropout_seed, 0};
  // Positions 0..T-1 for every row: a gather of the first T rows of wpe per batch row, so the
  // backward scatter-add sums the position gradient over the batch.
  // On the meta device (a memory prediction) the same tensor without host values.
  Tensor pos_ids = Tensor::empty({B, T}, DType::i32, MemCategory::data);
  if (!pos_ids.is_meta()) {
    int32_t* pos = pos_ids.data<int32_t>();
    for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>(i % T);
  }
  // ZeRO-3 (nn/gather.h): the embeddings, ln_f and the head gathered for the pass, each block
  // around its own.
  const nn::GatherScope rest(store_, rest_unit_);
  Var tok = wte_(idx);     // (B, T, C)
  Var pe = wpe_(pos_ids);  // (B, T, C)
  Var x = add(tok, pe);
  x = drop(x);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const nn::Block& b = blocks_[l];
    const FlatRanges& unit = l < block_units_.size() ? block_units_[l] : rest_unit_;
    if (!checkpoint_blocks_ || !grad_enabled()) {
      x = nn::gathered(
          store_, unit, [&](const Var& in) { return b(in, drop); }, x);
      continue;
    }
    // The recomputation must draw the same dropout masks: it starts from this block's offset, and
    // the offset after the block is read back from the forward run.
    const nn::DropoutState at_block = drop;
    auto offset_after = std::make_shared<uint64_t>(drop.offset);
    x = nn::gathered(
        store_, unit,
        [&](const Var& x_in) {
          return checkpoint(
              [&b, at_block, offset_after](const Var& in) {
                nn::DropoutState d = at_block;
                Var y = b(in, d);
                *offset_after = d.offset;
                return y;
              },
              x_in);
        },
        x);
    drop.offset = *offset_after;
  }
  x = ln_f_(x);  // (B, T, C)
  if (hidden_only_) return Output{x, Var()};
  // Training with the fused head: the loss without the logits (B, T, V) ever whole.
  if (fused_head_ && targets && training && grad_enabled() && !wte_.quantized())
    return Output{Var(), lm_head_loss(x, wte_.weight, *targets)};
  Var logits = wte_.project(x);  // (B, T, V) = x wte^T (tied)
  Output out{logits, Var()};
  if (targets) out.loss = cross_entropy(logits, *targets);
  return out;
}

EvalSums Gpt::evaluate_batch(const Batch& batch) {
  if (!fused_head_ || wte_.quantized()) return Model::evaluate_batch(batch);
  using namespace autograd;
  const nn::GatherScope rest(store_, rest_unit_);  // ZeRO-3: the head reads wte after forward
  hidden_only_ = true;
  Output h;
  try {
    h = forward(batch.inputs, nullptr, false, 0);
  } catch (...) {
    hidden_only_ = false;
    throw;
  }
  hidden_only_ = false;
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size;
  const Tensor x = h.logits.value().contiguous().reshape({-1, C});  // (N, C)
  const Tensor t = batch.targets.contiguous().reshape({-1});        // (N)
  const int64_t N = x.size(0), chunk = std::max<int64_t>(1, (int64_t{2} << 20) / V);
  EvalSums s;
  s.rows = batch.rows;
  double loss_sum = 0;  // over the scored targets
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t r1 = std::min(N, r0 + chunk);
    const Tensor tc = t.slice(0, r0, r1);
    const Var logits = wte_.project(Var(x.slice(0, r0, r1)));  // (rows, V)
    const Var loss = cross_entropy(logits, tc);                // the chunk's mean
    Tensor predicted = Tensor::empty({r1 - r0}, DType::i32, MemCategory::activations, x.device());
    argmax_last(logits.value(), predicted);
    if (predicted.is_meta()) continue;  // a memory prediction: no values to score
    const std::vector<int32_t> p = predicted.to_ints(), tv = tc.to_ints();
    int64_t scored = 0;
    for (size_t i = 0; i < tv.size(); ++i) {
      if (tv[i] == -1) continue;
      ++scored;
      if (p[i] == tv[i]) ++s.correct;
    }
    if (scored > 0) loss_sum += loss.value().item() * static_cast<double>(scored);
    s.scored += scored;
  }
  // As Model::evaluate_batch: the batch's mean loss times its real rows.
  if (s.scored > 0) s.loss_sum = loss_sum / static_cast<double>(s.scored) * static_cast<double>(batch.rows);
  return s;
}

bool is_hf_conv1d_weight(const std::string& name) {
  const auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with(".attn.c_attn.weight") || ends_with(".attn.c_proj.weight") ||
         ends_with(".mlp.c_fc.weight") || ends_with(".mlp.c_proj.weight");
}

std::vector<NamedWeight> Gpt::named_weights() const {
  std::vector<NamedWeight> w;
  for (size_t i = 0; i < store_.size(); ++i) {
    const std::string& name = store_.infos()[i].name;
    const bool conv1d = is_hf_conv1d_weight(name);
    if (store_.is_quantized(i)) {
      const QuantizedTensor q = store_.quantized(i);
      const int64_t R = q.codes.size(0);
      NamedWeight nw{name, Tensor(), conv1d ? q.codes.transpose(0, 1) : q.codes,
                     conv1d ? q.scale.reshape({1, R}) : q.scale.reshape({R, 1})};
      w.push_back(std::move(nw));
      continue;
    }
    const Tensor& p = store_.param(i);
    w.push_back({name, conv1d ? p.transpose(0, 1) : p, Tensor(), Tensor()});
  }
  return w;
}

std::vector<std::vector<std::string>> Gpt::fp8_linears() const {
  std::vector<std::vector<std::string>> v;
  for (const nn::Block& b : blocks_) {
    v.emplace_back();
    for (const nn::Linear* l : {&b.attn.c_attn, &b.attn.c_proj, &b.mlp.c_fc, &b.mlp.c_proj})
      v.back().push_back(l->prefix);
  }
  return v;
}

std::vector<std::string> Gpt::quantizable_parameters() const {
  std::vector<std::string> n{"transformer.wte.weight", "transformer.wpe.weight"};
  for (const nn::Block& b : blocks_)
    for (const nn::Linear* l : {&b.attn.c_attn, &b.attn.c_proj, &b.mlp.c_fc, &b.mlp.c_proj})
      n.push_back(l->prefix + ".weight");
  return n;
}

}  // namespace mixtrain
