// The memory predictor (see the header): a replay of one training run with byte counts instead of
// tensors. Each piece mirrors the code it models, in the same order, so that every allocation and
// every free happens at the same point as in the real run:
//   Ledger              tensor/memory.cpp      live and peak bytes per category
//   STensor, SVar, ...  autograd/variable.h    a value is freed when the last Var and the last node
//                                              that keeps it let go (Var::Handle)
//   Replay::<op>        autograd/functions.cpp one function per op: what it allocates and keeps
//   Replay::rule        autograd/backward_rules.cpp  what each backward rule allocates
//   Replay::backward    autograd/engine.cpp    the same reverse topological order, freeing as it goes
//   Replay::block, ...  nn/layers.cpp, models/gpt.cpp  the model, expression for expression (C++
//                                              temporaries live to the end of their expression)
//   Replay::run         train/trainer.cpp      set-up, steps, optimizer, final evaluation
// When an op starts keeping something else for backward, change its function here; the tests in
// tests/models/gpt_memory_test.cpp compare the prediction with the tracker and fail until then.
#include "mixtrain/models/gpt_memory.h"

#include <algorithm>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "kernels/attention_ops.h"  // attention_query_block, attention_heads_per_chunk
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/core/error.h"
#include "kernels/gemm_info.h"
#include "mixtrain/nn/layers.h"

namespace mixtrain {

void GptMemoryOptions::validate(const GptConfig& cfg) const {
  cfg.validate();
  // Messages name the fields as spelled here; the CLI says its flags instead (Error::fields()).
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  if (batch_size <= 0) bad("batch_size", " must be positive, got " + std::to_string(batch_size));
  if (seq_len < 0) bad("seq_len", " must be positive, got " + std::to_string(seq_len));
  if (seq_len > cfg.block_size)
    bad("seq_len", " " + std::to_string(seq_len) + " exceeds the model's block_size " + std::to_string(cfg.block_size));
  if (grad_accum <= 0) bad("grad_accum", " must be positive, got " + std::to_string(grad_accum));
  if (steps <= 0) bad("steps", " must be positive, got " + std::to_string(steps));
  if (eval_batches < 0) bad("eval_batches", " must be >= 0");
  // The largest tensors (B*H*T*T probabilities, B*T*V logits) must have a byte count far from
  // int64's range.
  const double B = static_cast<double>(batch_size),
               T = static_cast<double>(seq_len > 0 ? seq_len : cfg.block_size);
  const double widest = std::max({static_cast<double>(cfg.n_head) * T, static_cast<double>(cfg.vocab_size),
                                  4.0 * static_cast<double>(cfg.n_embd)});
  if (B * T * widest * 8.0 > 1e18)
    throw ArgumentError({"batch_size", "seq_len"}, "batch_size " + std::to_string(batch_size) + " x seq_len " +
                                                       std::to_string(static_cast<int64_t>(T)) +
                                                       " is impossibly large for this model");
}

namespace {

using autograd::OpKind;
using Dims = std::vector<int64_t>;

int64_t numel_of(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::string dtype_str(DType t) { return std::string(dtype_name(t)); }

// ---- the ledger: the memory tracker's arithmetic over symbolic blocks ----------------------------

class Ledger {
 public:
  struct Block {
    Ledger* owner = nullptr;
    int64_t id = 0;
    int64_t bytes = 0;
    MemCategory category = MemCategory::other;
    std::string name;
    ~Block() { owner->release(*this); }
  };
  using BlockPtr = std::shared_ptr<Block>;

  BlockPtr allocate(int64_t bytes, MemCategory c, std::string name) {
    auto b = std::make_shared<Block>();
    b->owner = this;
    b->id = static_cast<int64_t>(blocks_.size());
    b->bytes = bytes;
    b->category = c;
    b->name = std::move(name);
    blocks_.push_back({intern(b->name), c, bytes});
    events_.push_back(b->id + 1);
    const auto i = static_cast<size_t>(c);
    by_cat_[i] += bytes;
    total_ += bytes;
    peak_by_cat_[i] = std::max(peak_by_cat_[i], by_cat_[i]);
    if (total_ > peak_total_) {
      peak_total_ = total_;
      at_peak_ = by_cat_;
      peak_moment_ = phase;
      peak_event_ = events_.size();  // the live set at the peak is replayed from the log in fill()
    }
    return b;
  }

  std::string phase;

  void fill(GptMemoryPrediction& p) const {
    p.peak_bytes = peak_total_;
    p.peak_by_category = peak_by_cat_;
    p.at_peak = at_peak_;
    p.peak_moment = peak_moment_;
    // The blocks alive at the peak: the allocation log replayed up to the peak's event. (Copying
    // the live set at every new peak instead made a prediction quadratic in the number of layers.)
    std::vector<char> alive(blocks_.size(), 0);
    for (size_t e = 0; e < peak_event_; ++e)
      alive[static_cast<size_t>(std::abs(events_[e]) - 1)] = events_[e] > 0;
    std::map<std::pair<std::string, MemCategory>, MemoryTerm> terms;
    for (size_t id = 0; id < blocks_.size(); ++id) {
      if (!alive[id]) continue;
      const Logged& s = blocks_[id];
      const std::string& name = names_[static_cast<size_t>(s.name)];
      MemoryTerm& t = terms[{name, s.category}];
      t.name = name;
      t.category = s.category;
      ++t.count;
      t.bytes += s.bytes;
    }
    p.terms.clear();
    for (auto& [k, t] : terms) p.terms.push_back(t);
    std::stable_sort(p.terms.begin(), p.terms.end(),
                     [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
  }

 private:
  struct Logged {
    int32_t name;  // into names_
    MemCategory category;
    int64_t bytes;
  };
  int32_t intern(const std::string& name) {
    const auto [it, added] = name_ids_.try_emplace(name, static_cast<int32_t>(names_.size()));
    if (added) names_.push_back(name);
    return it->second;
  }
  void release(Block& b) {
    by_cat_[static_cast<size_t>(b.category)] -= b.bytes;
    total_ -= b.bytes;
    events_.push_back(-(b.id + 1));
  }
  std::vector<Logged> blocks_;     // every allocation, by id
  std::vector<int64_t> events_;    // id + 1: allocated, -(id + 1): freed, in order
  size_t peak_event_ = 0;          // events_[0, peak_event_) lead to the peak
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> name_ids_;
  std::array<int64_t, kNumMemCategories> by_cat_{}, peak_by_cat_{}, at_peak_{};
  int64_t total_ = 0, peak_total_ = 0;
  std::string peak_moment_;
};

// ---- tensors, variables and nodes without data (autograd/variable.h, node.h) ----------------------

struct STensor {
  Ledger::BlockPtr block;  // shared by views, as a Storage
  Dims shape;
  DType dtype = DType::f32;
  bool defined() const { return block != nullptr; }
  int64_t numel() const { return numel_of(shape); }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }
  const std::string& name() const { return block->name; }
  STensor view(Dims s) const { return {block, std::move(s), dtype}; }
};

struct SNode;
class SVar;

struct SImpl {
  STensor value;  // undefined once released
  Dims shape;
  DType dtype = DType::f32;
  std::string name;  // the value's name, kept after it is released (for gradient names)
  STensor grad;
  bool requires_grad = false;
  bool grad_is_buffer = false;
  bool param_cast = false;
  std::shared_ptr<SNode> grad_fn;
};

class SVar {
 public:
  SVar() = default;
  SVar(STensor value, bool requires_grad) : h_(std::make_shared<Handle>()) {
    h_->impl = std::make_shared<SImpl>();
    SImpl& v = *h_->impl;
    v.shape = value.shape;
    v.dtype = value.dtype;
    v.name = value.defined() ? value.name() : std::string();
    v.value = std::move(value);
    v.requires_grad = requires_grad;
  }
  static SVar parameter(STensor value, STensor grad) {
    SVar v(std::move(value), true);
    v.h_->impl->grad = std::move(grad);
    v.h_->impl->grad_is_buffer = true;
    return v;
  }
  bool defined() const { return h_ != nullptr; }
  const STensor& value() const { return h_->impl->value; }
  const STensor& grad() const { return h_->impl->grad; }
  bool requires_grad() const { return h_ && h_->impl->requires_grad; }
  const Dims& shape() const { return h_->impl->value.shape; }
  DType dtype() const { return h_->impl->value.dtype; }
  int64_t size(int d) const {
    const Dims& s = shape();
    return s[static_cast<size_t>(d < 0 ? static_cast<int>(s.size()) + d : d)];
  }
  const std::shared_ptr<SImpl>& impl() const {
    static const std::shared_ptr<SImpl> none;
    return h_ ? h_->impl : none;
  }

 private:
  // As Var::Handle: when the last Var goes, the graph keeps only what its nodes hold.
  struct Handle {
    std::shared_ptr<SImpl> impl;
    ~Handle() {
      if (impl && impl.use_count() > 1) impl->value = STensor();
    }
  };
  std::shared_ptr<Handle> h_;
};

struct SNode {
  OpKind op = OpKind::add;
  std::vector<std::shared_ptr<SImpl>> inputs;
  std::vector<STensor> in_values;
  std::vector<STensor> saved;
  STensor ids;
  Dims shape;
  bool b0 = false, b1 = false;
  int64_t i0 = 0;
  std::function<SVar(const SVar&)> fn;
  std::string where;  // the part of the model that recorded it (for the peak's moment)
};

struct Dropout {  // nn::DropoutState without the random stream (it changes no size)
  float p = 0.f;
  bool training = false;
  bool active() const { return p != 0.f && training; }
};

// One transformer block's parameters as leaves (nn::Block).
struct BlockParams {
  SVar ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b, ln_2_w, ln_2_b, c_fc_w, c_fc_b,
      mlp_proj_w, mlp_proj_b;
};

// ---- the replay ---------------------------------------------------------------------------------

class Replay {
 public:
  Replay(const GptConfig& cfg, const GptMemoryOptions& opt)
      : cfg_(cfg), opt_(opt), spec_(precision_spec(opt.precision)) {}
  GptMemoryPrediction run();

 private:
  struct AutocastState {
    bool enabled = false;
    DType dtype = DType::bf16;
    bool working_copy = false;  // a working copy is registered (WorkingCopyScope)
  };
  // AutocastScope (+ WorkingCopyScope): leaving the outermost one clears the weight-cast cache.
  struct AutocastRegion {
    Replay& r;
    AutocastState prev;
    AutocastRegion(Replay& rp, AutocastState s) : r(rp), prev(rp.ac_) {
      r.ac_ = s;
      ++r.ac_depth_;
    }
    ~AutocastRegion() {
      if (--r.ac_depth_ == 0) r.cast_cache_.clear();
      r.ac_ = prev;
    }
  };
  struct NoGrad {
    Replay& r;
    bool prev;
    explicit NoGrad(Replay& rp) : r(rp), prev(rp.grad_enabled_) { r.grad_enabled_ = false; }
    ~NoGrad() { r.grad_enabled_ = prev; }
  };

  STensor empty(Dims shape, DType dtype, std::string name, MemCategory c = MemCategory::activations) {
    const int64_t bytes = numel_of(shape) * static_cast<int64_t>(dtype_size(dtype));
    return {ledger_.allocate(bytes, c, std::move(name)), std::move(shape), dtype};
  }

  // -- GEMM temporaries (kernels/cpu/gemm_onednn.cpp): per-thread buffers, kept between calls and
  // grown to the largest need (freed after a call only above 64 MiB): oneDNN's scratchpad, and
  // where oneDNN cannot run the dtypes directly (fp16 without fp16 arithmetic) fp32 copies of
  // the operands and of the output. Their sizes come from the GEMM planner itself.
  static GemmQuery mm(const Dims& x, const Dims& y, bool tx, bool ty, DType in, DType out, float beta = 0.f,
                      bool bias = false) {
    GemmQuery q;
    q.in = in;
    q.out = out;
    q.batch = x.size() == 3 ? x[0] : (y.size() == 3 ? y[0] : 1);
    q.a_batched = x.size() == 3;
    q.b_batched = y.size() == 3;
    q.m = tx ? x.back() : x[x.size() - 2];
    q.k = tx ? x[x.size() - 2] : x.back();
    q.n = ty ? y[y.size() - 2] : y.back();
    q.trans_a = tx;
    q.trans_b = ty;
    q.beta = beta;
    q.bias = bias;
    return q;
  }
  void scratch_get(STensor& buf, int64_t bytes, const char* name) {
    if (!buf.defined() || buf.nbytes() < bytes) {
      buf = STensor();  // freed first: the peak is the new size, not old + new
      buf = empty({(bytes + 3) / 4 + 16}, DType::f32, name, MemCategory::workspace);
    }
  }
  void gemm(const GemmQuery& q) {
    const auto key =
        std::make_tuple(static_cast<int>(q.in), static_cast<int>(q.out), q.batch, q.m, q.n, q.k,
                        q.a_batched * 8 + q.b_batched * 4 + q.trans_a * 2 + q.trans_b, q.beta, q.bias);
    auto it = scratch_sizes_.find(key);
    if (it == scratch_sizes_.end()) it = scratch_sizes_.emplace(key, gemm_scratch_for(q)).first;
    const GemmScratchBytes& s = it->second;
    if (s.src_f32 > 0) scratch_get(scratch_a_, s.src_f32, "GEMM scratch: fp32 copy of an fp16 operand");
    if (s.wei_f32 > 0) scratch_get(scratch_b_, s.wei_f32, "GEMM scratch: fp32 copy of an fp16 operand");
    if (s.dst_f32 > 0) scratch_get(scratch_c_, s.dst_f32, "GEMM scratch: fp32 output");
    if (s.scratchpad > 0) scratch_get(scratch_pad_, s.scratchpad, "GEMM scratch: oneDNN scratchpad");
    for (STensor* b : {&scratch_a_, &scratch_b_, &scratch_c_, &scratch_pad_})
      if (b->defined() && b->nbytes() > (int64_t{64} << 20)) *b = STensor();
  }

  // -- autograd plumbing (autograd/functions.cpp) --
  bool needs_grad(std::initializer_list<const SVar*> inputs) const {
    if (!grad_enabled_) return false;
    for (const SVar* v : inputs)
      if (v->defined() && v->requires_grad()) return true;
    return false;
  }
  std::shared_ptr<SNode> make_node(OpKind op, std::initializer_list<const SVar*> inputs) {
    auto n = std::make_shared<SNode>();
    n->op = op;
    n->where = where_;
    for (const SVar* v : inputs) {
      // The engine's own table decides which input values a node keeps.
      const bool keep = v->defined() && autograd::backward_reads_input(op, n->inputs.size());
      n->in_values.push_back(keep ? v->value() : STensor());
      n->inputs.push_back(v->defined() ? v->impl() : std::make_shared<SImpl>());
    }
    return n;
  }
  static SVar make_output(STensor value, std::shared_ptr<SNode> node) {
    SVar out(std::move(value), node != nullptr);
    if (node) out.impl()->grad_fn = std::move(node);
    return out;
  }

  // -- autocast (amp/autocast.cpp), with the engine's policy table --
  static bool eligible(const SVar& v) {
    return v.defined() && is_floating(v.dtype()) && v.dtype() != DType::f64;
  }
  static DType wider(DType a, DType b) {
    if (a == b) return a;
    if (dtype_size(a) != dtype_size(b)) return dtype_size(a) > dtype_size(b) ? a : b;
    return DType::f32;
  }
  DType output_dtype(OpKind op, DType in) const {  // autocast_output_dtype
    if (!ac_.enabled || autocast_policy(op) != CastPolicy::fp32) return in;
    return (in == DType::bf16 || in == DType::f16) ? DType::f32 : in;
  }
  DType promote_dtype(DType a, DType b) const {  // autocast_promote_dtype
    if (!ac_.enabled) return a;
    return wider(a, b);
  }
  void autocast(OpKind op, std::initializer_list<SVar*> inputs) {
    if (!ac_.enabled) return;
    DType target = DType::f32;
    switch (autocast_policy(op)) {
      case CastPolicy::keep:
      case CastPolicy::fp32:  // read 16-bit storage in fp32 inside the kernel: no copy
        return;
      case CastPolicy::lower_precision:
        target = ac_.dtype;
        break;
      case CastPolicy::promote: {
        if (inputs.size() == 2 && eligible(**inputs.begin()) && eligible(**(inputs.begin() + 1))) return;
        bool any = false;
        for (const SVar* v : inputs)
          if (eligible(*v)) {
            target = any ? wider(target, v->dtype()) : v->dtype();
            any = true;
          }
        if (!any) return;
        break;
      }
    }
    for (SVar* v : inputs)
      if (eligible(*v) && v->dtype() != target) *v = autocast_cast(*v, target);
  }
  // A parameter's 16-bit copy: a view of the working copy once the optimizer writes one, else a
  // cached cast (MemCategory::cast_cache) made once per forward region (not cached without grad).
  SVar autocast_cast(const SVar& x, DType target) {
    const bool cacheable = is_low_precision(target) && x.dtype() == DType::f32 && x.requires_grad() &&
                           x.impl()->grad_fn == nullptr;
    if (!cacheable) return cast(x, target);
    if (ac_.working_copy) return cast_from_cache(x, STensor{working_.block, x.shape(), target});
    if (auto it = cast_cache_.find(x.impl().get()); it != cast_cache_.end())
      return cast_from_cache(x, it->second);
    if (!grad_enabled_) return cast(x, target);
    STensor c = empty(x.shape(), target, "weights cast to " + dtype_str(target) + " (autocast cache)",
                      MemCategory::cast_cache);
    cast_cache_[x.impl().get()] = c;
    return cast_from_cache(x, c);
  }
  SVar cast_from_cache(const SVar& x, const STensor& cached) {
    if (!grad_enabled_) return SVar(cached, false);
    auto n = std::make_shared<SNode>();
    n->op = OpKind::cast;
    n->where = where_;
    n->inputs = {x.impl()};
    SVar out(cached, true);
    out.impl()->grad_fn = std::move(n);
    out.impl()->param_cast = true;
    return out;
  }

  // ---- the ops (autograd/functions.cpp), one function each ----

  // cast: a new tensor in the target dtype; keeps nothing (its backward casts the gradient back).
  SVar cast(const SVar& x, DType dtype) {
    if (x.dtype() == dtype) return x;
    STensor out = empty(x.shape(), dtype, x.impl()->name + ", cast to " + dtype_str(dtype));
    std::shared_ptr<SNode> n;
    if (needs_grad({&x})) n = make_node(OpKind::cast, {&x});
    return make_output(out, n);
  }

  // linear: keeps x and w (kRules 0b011; under autocast the 16-bit casts, w being a view of the
  // working copy or a cache entry). A 16-bit bias is widened into an fp32 workspace row for the
  // GEMM's epilogue.
  SVar linear(const SVar& x_in, const SVar& w_in, const SVar& b_in, const std::string& name) {
    SVar x = x_in, w = w_in, b = b_in;
    autocast(OpKind::linear, {&x, &w, &b});
    const int64_t in = w.size(1), outf = w.size(0), R = numel_of(x.shape()) / in;
    Dims s = x.shape();
    s.back() = outf;
    STensor out = empty(s, x.dtype(), name + " " + dtype_str(x.dtype()));
    {
      STensor bias32;
      if (b.defined() && b.dtype() != DType::f32)
        bias32 = empty({outf}, DType::f32, "bias widened to f32", MemCategory::workspace);
      gemm(mm({R, in}, {outf, in}, false, true, x.dtype(), x.dtype(), 0.f, b.defined()));
    }
    std::shared_ptr<SNode> n;
    if (needs_grad({&x, &w, &b})) n = make_node(OpKind::linear, {&x, &w, &b});
    return make_output(out, n);
  }

  // matmul: keeps both operands (0b011). (B, M, K) x (K, N) runs as one 2-D GEMM between two
  // reshapes (views).
  SVar matmul(const SVar& a_in, const SVar& b_in, bool ta, bool tb, const std::string& name) {
    SVar a = a_in, b = b_in;
    autocast(OpKind::matmul, {&a, &b});
    if (a.shape().size() == 3 && b.shape().size() == 2 && !ta) {
      const int64_t Bt = a.size(0), M = a.size(1);
      SVar out = matmul(reshape(a, {Bt * M, a.size(2)}), b, false, tb, name);
      return reshape(out, {Bt, M, out.size(1)});
    }
    Dims s;
    if (a.shape().size() == 3)
      s.push_back(a.size(0));
    else if (b.shape().size() == 3)
      s.push_back(b.size(0));
    const int64_t M = ta ? a.size(-1) : a.size(-2), N = tb ? b.size(-2) : b.size(-1);
    s.push_back(M);
    s.push_back(N);
    STensor out = empty(s, a.dtype(), name + " " + dtype_str(a.dtype()));
    gemm(mm(a.shape(), b.shape(), ta, tb, a.dtype(), a.dtype()));
    std::shared_ptr<SNode> n;
    if (needs_grad({&a, &b})) {
      n = make_node(OpKind::matmul, {&a, &b});
      n->b0 = ta;
      n->b1 = tb;
    }
    return make_output(out, n);
  }

  // add: the output in the promoted dtype (fp32 + bf16 -> fp32, the residual stream); keeps
  // nothing.
  SVar add(const SVar& a_in, const SVar& b_in, const std::string& name) {
    SVar a = a_in, b = b_in;
    autocast(OpKind::add, {&a, &b});
    const DType dt = promote_dtype(a.dtype(), b.dtype());
    STensor out = empty(a.shape(), dt, name + " " + dtype_str(dt));
    std::shared_ptr<SNode> n;
    if (needs_grad({&a, &b})) n = make_node(OpKind::add, {&a, &b});
    return make_output(out, n);
  }

  // gelu: keeps its input (0b001).
  SVar gelu(const SVar& x_in, const std::string& name) {
    SVar x = x_in;
    autocast(OpKind::gelu, {&x});
    STensor out = empty(x.shape(), x.dtype(), name + " " + dtype_str(x.dtype()));
    std::shared_ptr<SNode> n;
    if (needs_grad({&x})) n = make_node(OpKind::gelu, {&x});
    return make_output(out, n);
  }

  // layer_norm: the output in fp32 under autocast (fp32 policy). Keeps its input and weight
  // (0b011) plus mean and 1/std (fp32, one per row). Under autocast with an fp32 input (the
  // residual stream) it keeps x-hat in the 16-bit compute dtype in place of x (the kernel writes
  // it in the same pass), and drops the mean.
  SVar layer_norm(const SVar& x_in, const SVar& w_in, const SVar& b_in, const std::string& name) {
    SVar x = x_in, w = w_in, b = b_in;
    autocast(OpKind::layer_norm, {&x, &w, &b});
    const DType out_dtype = output_dtype(OpKind::layer_norm, x.dtype());
    const int64_t C = x.size(-1), R = numel_of(x.shape()) / C;
    STensor out = empty(x.shape(), out_dtype, name + " output " + dtype_str(out_dtype));
    STensor mean = empty({R}, DType::f32, name + " mean (B*T) f32");
    STensor rstd = empty({R}, DType::f32, name + " 1/std (B*T) f32");
    const bool grad = needs_grad({&x, &w, &b});
    const bool keep_xhat =
        grad && ac_.enabled && dtype_size(ac_.dtype) < dtype_size(x.dtype()) && x.dtype() == DType::f32;
    STensor xhat =
        keep_xhat ? empty({R, C}, ac_.dtype, name + " x-hat (B, T, C) " + dtype_str(ac_.dtype)) : STensor();
    std::shared_ptr<SNode> n;
    if (grad) {
      n = make_node(OpKind::layer_norm, {&x, &w, &b});
      n->saved = {mean, rstd};
      if (keep_xhat) {
        n->in_values[0] = xhat;
        n->b0 = true;
        n->saved[0] = STensor();
      }
    }
    return make_output(out, n);
  }

  // embedding: the rows in the weight's dtype; keeps only the ids (not an allocation of its own).
  SVar embedding(const SVar& weight_in, const STensor& ids, const std::string& name) {
    SVar weight = weight_in;
    autocast(OpKind::embedding, {&weight});
    Dims s = ids.shape;
    s.push_back(weight.size(1));
    STensor out = empty(s, weight.dtype(), name + " " + dtype_str(weight.dtype()));
    std::shared_ptr<SNode> n;
    if (needs_grad({&weight})) {
      n = make_node(OpKind::embedding, {&weight});
      n->ids = ids;
    }
    return make_output(out, n);
  }

  // causal_softmax (the unfused attention, with dropout): keeps its output (saved), not its input.
  SVar causal_softmax(const SVar& x_in, const std::string& name) {
    SVar x = x_in;
    autocast(OpKind::causal_softmax, {&x});
    const DType dt = output_dtype(OpKind::causal_softmax, x.dtype());
    STensor out = empty(x.shape(), dt, name + " " + dtype_str(dt));
    std::shared_ptr<SNode> n;
    if (needs_grad({&x})) {
      n = make_node(OpKind::causal_softmax, {&x});
      n->saved = {out};
    }
    return make_output(out, n);
  }

  // cross_entropy: a 1-element fp32 loss; keeps the logits (0b001) and the targets.
  SVar cross_entropy(const SVar& logits_in, const STensor& targets) {
    SVar logits = logits_in;
    autocast(OpKind::cross_entropy, {&logits});
    STensor out = empty({1}, DType::f32, "loss");
    std::shared_ptr<SNode> n;
    if (needs_grad({&logits})) {
      n = make_node(OpKind::cross_entropy, {&logits});
      n->ids = targets;
    }
    return make_output(out, n);
  }

  // reshape: a view; keeps nothing.
  SVar reshape(const SVar& x_in, Dims shape) {
    SVar x = x_in;
    autocast(OpKind::reshape, {&x});
    STensor out = x.value().view(std::move(shape));
    std::shared_ptr<SNode> n;
    if (needs_grad({&x})) {
      n = make_node(OpKind::reshape, {&x});
      n->shape = x.shape();
    }
    return make_output(out, n);
  }

  // split_heads: a contiguous (B*H, T, D) copy of q, k or v; keeps nothing.
  SVar split_heads(const SVar& qkv_in, int64_t H, const std::string& name) {
    SVar qkv = qkv_in;
    autocast(OpKind::split_heads, {&qkv});
    const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3 / H;
    STensor heads = empty({B, H, T, D}, qkv.dtype(), name + " (B*H, T, D) " + dtype_str(qkv.dtype()));
    std::shared_ptr<SNode> n;
    if (needs_grad({&qkv})) {
      n = make_node(OpKind::split_heads, {&qkv});
      n->i0 = H;
    }
    return make_output(heads.view({B * H, T, D}), n);
  }

  // merge_heads: a contiguous (B, T, C) copy; keeps nothing.
  SVar merge_heads(const SVar& y_in, int64_t batch, const std::string& name) {
    SVar y = y_in;
    autocast(OpKind::merge_heads, {&y});
    const int64_t H = y.size(0) / batch, T = y.size(1), D = y.size(2);
    STensor out = empty({batch, T, H, D}, y.dtype(), name + " " + dtype_str(y.dtype()));
    std::shared_ptr<SNode> n;
    if (needs_grad({&y})) {
      n = make_node(OpKind::merge_heads, {&y});
      n->i0 = batch;
    }
    return make_output(out.view({batch, T, H * D}), n);
  }

  // dropout: keeps nothing (the mask is regenerated from the seed); its mask is applied through
  // a workspace copy in the output dtype.
  SVar dropout(const SVar& x_in, const Dropout& d, const std::string& name) {
    SVar x = x_in;
    autocast(OpKind::dropout, {&x});
    if (!d.active()) return x;
    STensor out = empty(x.shape(), x.dtype(), name + " " + dtype_str(x.dtype()));
    { const STensor tmp = empty(x.shape(), x.dtype(), "dropout mask pass", MemCategory::workspace); }
    std::shared_ptr<SNode> n;
    if (needs_grad({&x})) n = make_node(OpKind::dropout, {&x});
    return make_output(out, n);
  }

  // The blocked causal attention (autograd/attention_blocks.cpp): query rows go in blocks of Tb;
  // block i, rows [r0, r1), sees only the keys [0, r1), so its probabilities are (heads, r1 - r0,
  // r1): the lower triangle, kept in the compute dtype. The work goes a chunk of heads at a time;
  // a block's fp32 scores (or their gradient) are workspace that lives for that block only.
  struct QueryBlock {
    int64_t r0, r1;
  };
  static std::vector<QueryBlock> query_blocks(int64_t T) {
    const int64_t Tb = attention_query_block(T);
    std::vector<QueryBlock> b;
    for (int64_t r0 = 0; r0 < T; r0 += Tb) b.push_back({r0, std::min(T, r0 + Tb)});
    return b;
  }
  static int64_t heads_per_chunk(int64_t T) {
    return attention_heads_per_chunk(T, attention_query_block(T));
  }
  std::vector<STensor> prob_blocks(int64_t n, int64_t T, DType dt) {
    std::vector<STensor> probs;
    for (const QueryBlock& b : query_blocks(T))
      probs.push_back(empty({n, b.r1 - b.r0, b.r1}, dt,
                            "attention probabilities, lower triangle (B*H, T, <=T) " + dtype_str(dt)));
    return probs;
  }
  // A GEMM operand that is rows [r0, r1) of (h, T, D) heads: its matrices are T*D apart.
  static GemmQuery strided(GemmQuery q, int64_t a, int64_t b, int64_t c) {
    q.a_batch_stride = a;
    q.b_batch_stride = b;
    q.c_batch_stride = c;
    return q;
  }
  // attention_heads_forward: per chunk, per block, S = q[r0:r1] k[0:r1]^T (f32), then
  // y[r0:r1] = P v[0:r1].
  void attention_heads_forward(int64_t BH, int64_t T, int64_t D, DType dt) {
    const int64_t chunk = heads_per_chunk(T), TD = T * D;
    for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
      const int64_t h = std::min(BH, h0 + chunk) - h0;
      for (const auto& [r0, r1] : query_blocks(T)) {
        {
          const STensor scores =
              empty({h, r1 - r0, r1}, DType::f32, "attention scores, one block of one chunk, f32",
                    MemCategory::workspace);
          gemm(strided(mm({h, r1 - r0, D}, {h, r1, D}, false, true, dt, DType::f32), TD, TD, 0));
        }
        gemm(strided(mm({h, r1 - r0, r1}, {h, r1, D}, false, false, dt, dt), 0, TD, TD));
      }
    }
  }
  // attention_heads_backward: per chunk, dk and dv gathered in fp32 (workspace unless they are
  // fp32), blocks from the last: dv += P^T dy; dP = dy v^T (f32); dS (compute dtype); dq = dS k;
  // dk += dS^T q.
  void attention_heads_backward(int64_t BH, int64_t T, int64_t D, DType dt, DType dq_dt, DType dk_dt,
                                DType dv_dt, bool need_qk, bool need_v) {
    const int64_t chunk = heads_per_chunk(T), TD = T * D;
    const std::vector<QueryBlock> blocks = query_blocks(T);
    for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
      const int64_t h = std::min(BH, h0 + chunk) - h0;
      const STensor dk_acc =
          need_qk && dk_dt != DType::f32
              ? empty({h, T, D}, DType::f32, "attention dk in f32, one chunk", MemCategory::workspace)
              : STensor();
      const STensor dv_acc =
          need_v && dv_dt != DType::f32
              ? empty({h, T, D}, DType::f32, "attention dv in f32, one chunk", MemCategory::workspace)
              : STensor();
      for (size_t i = blocks.size(); i-- > 0;) {
        const auto [r0, r1] = blocks[i];
        const float beta = i + 1 == blocks.size() ? 0.f : 1.f;
        if (need_v)
          gemm(strided(mm({h, r1 - r0, r1}, {h, r1 - r0, D}, true, false, dt, DType::f32, beta), 0, TD, TD));
        if (!need_qk) continue;
        const STensor ds =
            empty({h, r1 - r0, r1}, dt, "attention score gradient, one block of one chunk, " + dtype_str(dt),
                  MemCategory::workspace);
        {
          const STensor dp =
              empty({h, r1 - r0, r1}, DType::f32,
                    "attention probability gradient, one block of one chunk, f32", MemCategory::workspace);
          gemm(strided(mm({h, r1 - r0, D}, {h, r1, D}, false, true, dt, DType::f32), TD, TD, 0));
        }
        gemm(strided(mm({h, r1 - r0, r1}, {h, r1, D}, false, false, dt, dq_dt), 0, TD, TD));
        gemm(strided(mm({h, r1 - r0, r1}, {h, r1 - r0, D}, true, false, dt, DType::f32, beta), 0, TD, TD));
      }
    }
  }

  // attention_qkv: q, k, v copied out of qkv (B, T, 3C) as (B*H, T, D) tensors; the output by head
  // is a workspace copied into (B, T, C). Keeps no input value (0b000): q, k, v and the probability
  // blocks are saved.
  SVar attention_qkv(const SVar& qkv_in, int64_t H) {
    SVar qkv = qkv_in;
    autocast(OpKind::attention_qkv, {&qkv});
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / H;
    const DType dt = qkv.dtype();
    std::vector<STensor> heads;
    for (const char* w : {"q", "k", "v"})
      heads.push_back(empty({B * H, T, D}, dt, std::string(w) + " (B*H, T, D) " + dtype_str(dt)));
    std::vector<STensor> probs = prob_blocks(B * H, T, dt);
    const STensor y = empty({B * H, T, D}, dt, "attention output by head (B*H, T, D) " + dtype_str(dt),
                            MemCategory::workspace);
    attention_heads_forward(B * H, T, D, dt);
    STensor out = empty({B, T, C}, dt, "attention output, c_proj input (B, T, C) " + dtype_str(dt));
    std::shared_ptr<SNode> n;
    if (needs_grad({&qkv})) {
      n = make_node(OpKind::attention_qkv, {&qkv});
      n->saved = std::move(heads);
      for (STensor& p : probs) n->saved.push_back(std::move(p));
      n->i0 = H;
    }
    return make_output(out, n);
  }

  // checkpoint: runs fn without a graph and keeps only its input (0b001); backward runs fn again
  // in the same autocast state.
  SVar checkpoint(const std::function<SVar(const SVar&)>& fn, const SVar& x) {
    if (!grad_enabled_) return fn(x);
    STensor out;
    {
      NoGrad no_grad(*this);
      out = fn(x).value();
    }
    std::shared_ptr<SNode> n = make_node(OpKind::checkpoint, {&x});
    n->in_values[0] = x.value();
    const AutocastState state = ac_;
    const std::string where = where_;
    n->fn = [this, fn, state, where](const SVar& in) {
      AutocastRegion scope(*this, state);
      const std::string outer = where_;
      where_ = where + " (recomputed)";
      SVar y = fn(in);
      where_ = outer;
      return y;
    };
    return make_output(out, n);
  }

  // ---- backward (autograd/engine.cpp and backward_rules.cpp) ----

  void accumulate_grad(SImpl& in, const STensor& g) {
    if (!in.requires_grad) return;
    if (in.grad_is_buffer) return;  // added in place into the parameter's gradient buffer
    if (!in.grad.defined()) {
      in.grad = g.dtype == in.dtype ? g : empty(in.shape, in.dtype, "gradient of " + in.name);
      return;
    }
    if (in.grad.block.use_count() == 1) return;                               // ours alone: added in place
    in.grad = empty(in.grad.shape, in.grad.dtype, "gradient of " + in.name);  // a fresh sum
  }
  // The gradient as a tensor a rule may add a part into (grad_accumulator).
  STensor& grad_accumulator(SImpl& in) {
    if (!in.grad.defined())
      in.grad = empty(in.shape, in.dtype, "gradient of " + in.name);
    else if (!in.grad_is_buffer && in.grad.block.use_count() != 1)
      in.grad = empty(in.grad.shape, in.grad.dtype, "gradient of " + in.name);
    return in.grad;
  }
  // Where a weight gradient goes: straight into the fp32 buffer for autocast's copy of a parameter.
  static SImpl& grad_target(SImpl& in) {
    if (in.param_cast && in.grad_fn && in.grad_fn->op == OpKind::cast && in.grad_fn->inputs.size() == 1) {
      SImpl& p = *in.grad_fn->inputs[0];
      if (p.grad_is_buffer && p.requires_grad) return p;
    }
    return in;
  }
  // d(input) += op(x) @ op(y): straight into a gradient buffer (beta = 1), else a new tensor.
  void grad_gemm(SImpl& in_or_cast, const Dims& x, const Dims& y, bool tx, bool ty, DType dt) {
    SImpl& in = grad_target(in_or_cast);
    if (!in.requires_grad) return;
    if (in.grad_is_buffer) {
      gemm(mm(x, y, tx, ty, dt, spec_.grad_dtype, 1.f));
      return;
    }
    STensor g = empty(in.shape, in.dtype, "gradient of " + in.name);
    gemm(mm(x, y, tx, ty, dt, in.dtype));
    accumulate_grad(in, g);
  }
  void grad_row_sum(SImpl& in_or_cast, int64_t out_features) {
    SImpl& in = grad_target(in_or_cast);
    if (!in.requires_grad) return;
    STensor s;
    if (!in.grad_is_buffer) s = empty(in.shape, in.dtype, "gradient of " + in.name);
    { const STensor tmp = empty({out_features}, DType::f32, "bias gradient row", MemCategory::workspace); }
    if (s.defined()) accumulate_grad(in, s);
  }

  void rule(SNode& n, const STensor& g) {
    switch (n.op) {
      case OpKind::matmul: {  // dA and dB, one GEMM each on the kept operands
        SImpl &A = *n.inputs[0], &B = *n.inputs[1];
        const Dims &a = A.shape, &b = B.shape, &gs = g.shape;
        const DType dt = g.dtype;
        if (!n.b0 && !n.b1) {  // dA = dC B^T, dB = A^T dC
          grad_gemm(A, gs, b, false, true, dt);
          grad_gemm(B, a, gs, true, false, dt);
        } else if (!n.b0 && n.b1) {  // dA = dC B, dB = dC^T A
          grad_gemm(A, gs, b, false, false, dt);
          grad_gemm(B, gs, a, true, false, dt);
        } else if (n.b0 && !n.b1) {  // dA = B dC^T, dB = A dC
          grad_gemm(A, b, gs, false, true, dt);
          grad_gemm(B, a, gs, false, false, dt);
        } else {  // dA = B^T dC^T, dB = dC^T A^T
          grad_gemm(A, b, gs, true, true, dt);
          grad_gemm(B, gs, a, true, true, dt);
        }
        break;
      }
      case OpKind::linear: {
        SImpl &X = *n.inputs[0], &W = *n.inputs[1], &Bi = *n.inputs[2];
        const int64_t out = W.shape[0], in = W.shape[1], R = g.numel() / out;
        if (X.requires_grad) {  // dx = dy W
          STensor dx = empty(X.shape, X.dtype, "gradient of " + X.name);
          gemm(mm({R, out}, {out, in}, false, false, g.dtype, X.dtype));
          accumulate_grad(X, dx);
        }
        if (W.requires_grad) grad_gemm(W, {R, out}, {R, in}, true, false, g.dtype);  // dW = dy^T x
        grad_row_sum(Bi, out);
        break;
      }
      case OpKind::add: {
        SImpl &A = *n.inputs[0], &B = *n.inputs[1];
        accumulate_grad(A, g);
        if (A.shape != B.shape)
          grad_row_sum(B, A.shape.back());
        else
          accumulate_grad(B, g);
        break;
      }
      case OpKind::gelu:
      case OpKind::causal_softmax:
      case OpKind::dropout: {
        SImpl& X = *n.inputs[0];
        STensor dx = empty(X.shape, X.dtype, "gradient of " + X.name);
        if (n.op == OpKind::dropout) {
          const STensor tmp = empty(X.shape, X.dtype, "dropout mask pass", MemCategory::workspace);
        }
        accumulate_grad(X, dx);
        break;
      }
      case OpKind::layer_norm: {
        SImpl &X = *n.inputs[0], &W = *n.inputs[1], &Bi = *n.inputs[2];
        STensor dx = empty(X.shape, X.dtype, "gradient of " + X.name);
        const int64_t C = X.shape.back();
        STensor dw = W.grad_is_buffer ? STensor() : empty({C}, W.dtype, "gradient of " + W.name);
        STensor db = Bi.grad_is_buffer ? STensor() : empty({C}, Bi.dtype, "gradient of " + Bi.name);
        accumulate_grad(X, dx);
        if (!W.grad_is_buffer) accumulate_grad(W, dw);
        if (!Bi.grad_is_buffer) accumulate_grad(Bi, db);
        break;
      }
      case OpKind::embedding:
        break;  // scatter-added into the gradient buffer
      case OpKind::cross_entropy: {
        SImpl& L = *n.inputs[0];
        STensor dl = empty(L.shape, L.dtype, "gradient of " + L.name);
        accumulate_grad(L, dl);
        break;
      }
      case OpKind::reshape:
        accumulate_grad(*n.inputs[0], g.view(n.shape));
        break;
      case OpKind::split_heads: {
        SImpl& Q = *n.inputs[0];
        if (!Q.requires_grad) break;
        const STensor& d = grad_accumulator(Q);  // (B, T, 3C); this head's part added in place
        // The part is a strided (B, H, T, D) view without a row view: the add kernel reads a
        // contiguous copy of it (in its storage's category) and writes a workspace copied back.
        const STensor part =
            empty(g.shape, d.dtype, "gradient of " + Q.name + ", one part, copied", d.block->category);
        const STensor out =
            empty(g.shape, d.dtype, "gradient of " + Q.name + ", one part, written", MemCategory::workspace);
        break;
      }
      case OpKind::merge_heads: {
        SImpl& Y = *n.inputs[0];
        STensor d = empty(Y.shape, Y.dtype, "gradient of " + Y.name);
        accumulate_grad(Y, d);
        break;
      }
      case OpKind::cast: {
        SImpl& X = *n.inputs[0];
        accumulate_grad(X, g.dtype == X.dtype ? g : empty(X.shape, X.dtype, "gradient of " + X.name));
        break;
      }
      case OpKind::attention_qkv: {
        SImpl& X = *n.inputs[0];
        if (!X.requires_grad) break;
        const STensor& q = n.saved[0];
        const int64_t BH = q.shape[0], T = q.shape[1], D = q.shape[2];
        STensor gh = empty(q.shape, q.dtype, "attention output gradient by head", MemCategory::workspace);
        if (g.dtype != q.dtype) {
          const STensor cast =
              empty(g.shape, q.dtype, "attention output gradient, cast", MemCategory::workspace);
        }
        std::vector<STensor> d;
        for (const char* w : {"dq", "dk", "dv"})
          d.push_back(empty(q.shape, q.dtype, std::string("attention ") + w + " (B*H, T, D)",
                            MemCategory::workspace));
        attention_heads_backward(BH, T, D, q.dtype, q.dtype, q.dtype, q.dtype, true, true);
        gh = STensor();
        STensor dx = empty(X.shape, q.dtype, "gradient of " + X.name);
        accumulate_grad(X, dx);
        break;
      }
      case OpKind::checkpoint: {
        SImpl& X = *n.inputs[0];
        SVar x(n.in_values[0], X.requires_grad);
        SVar y = n.fn(x);
        if (y.requires_grad()) backward_from(y.impl(), g);
        if (X.requires_grad && x.grad().defined()) accumulate_grad(X, x.grad());
        break;
      }
      case OpKind::mul:
      case OpKind::scale:
      case OpKind::attention:  // the model runs attention_qkv (or the unfused graph with dropout)
      case OpKind::count_:
        throw ArgumentError("memory prediction: op " + std::string(autograd::op_kind_name(n.op)) +
                            " is not part of the GPT model");
    }
  }

  void backward_from(const std::shared_ptr<SImpl>& root, const STensor& grad) {
    std::vector<std::shared_ptr<SImpl>> order;
    std::unordered_map<const SImpl*, bool> seen;
    std::vector<std::pair<std::shared_ptr<SImpl>, size_t>> stack{{root, 0}};
    seen[root.get()] = true;
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const SNode* n = v->grad_fn.get();
      if (n && next < n->inputs.size()) {
        const std::shared_ptr<SImpl>& child = n->inputs[next++];
        if (child->requires_grad && seen.emplace(child.get(), true).second) stack.push_back({child, 0});
      } else {
        order.push_back(std::move(v));
        stack.pop_back();
      }
    }
    accumulate_grad(*root, grad);
    const std::string outer = ledger_.phase;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      SImpl* v = it->get();
      if (v->grad_fn) {
        std::shared_ptr<SNode> node = std::move(v->grad_fn);
        ledger_.phase = step_label_ + " backward, " + node->where;
        if (v->grad.defined()) rule(*node, v->grad);
        v->grad = STensor();
      }
      it->reset();
    }
    ledger_.phase = outer;
  }

  // ---- the model (nn/layers.cpp, models/gpt.cpp) ----

  void set_where(const std::string& w) {
    where_ = w;
    ledger_.phase = step_label_ + (grad_enabled_ ? " forward, " : " forward (no grad), ") + w;
  }

  SVar attn(const SVar& x, const BlockParams& p, const Dropout& drop) {
    const int64_t B = x.size(0), H = cfg_.n_head;
    SVar qkv = linear(x, p.c_attn_w, p.c_attn_b, "c_attn output qkv (B, T, 3C)");
    SVar y;
    if (drop.active()) {  // the unfused graph
      SVar q = split_heads(qkv, H, "q");
      SVar k = split_heads(qkv, H, "k");
      SVar v = split_heads(qkv, H, "v");
      SVar att = matmul(q, k, false, true, "attention scores q k^T (B*H, T, T)");
      att = dropout(causal_softmax(att, "attention probabilities (B*H, T, T)"), drop,
                    "attention probabilities after dropout (B*H, T, T)");
      y = merge_heads(matmul(att, v, false, false, "attention output (B*H, T, D)"), B,
                      "merged heads, c_proj input (B, T, C)");
    } else {
      y = attention_qkv(qkv, H);
    }
    return dropout(linear(y, p.attn_proj_w, p.attn_proj_b, "attn c_proj output (B, T, C)"), drop,
                   "attn c_proj output after dropout (B, T, C)");
  }

  SVar mlp(const SVar& x, const BlockParams& p, const Dropout& drop) {
    return dropout(linear(gelu(linear(x, p.c_fc_w, p.c_fc_b, "c_fc output, GELU input (B, T, 4C)"),
                               "GELU output, c_proj input (B, T, 4C)"),
                          p.mlp_proj_w, p.mlp_proj_b, "mlp c_proj output (B, T, C)"),
                   drop, "mlp c_proj output after dropout (B, T, C)");
  }

  SVar block(const SVar& x, const BlockParams& p, const Dropout& drop) {
    SVar h = add(x, attn(layer_norm(x, p.ln_1_w, p.ln_1_b, "ln_1"), p, drop),
                 "residual after attention (B, T, C)");
    return add(h, mlp(layer_norm(h, p.ln_2_w, p.ln_2_b, "ln_2"), p, drop),
               "block output, residual (B, T, C)");
  }

  struct ModelOut {
    SVar logits, loss;
  };
  ModelOut forward(const STensor& idx, const STensor* targets, bool training) {
    const int64_t B = idx.shape[0], T = idx.shape[1];
    const Dropout drop{cfg_.dropout, training};
    set_where("embeddings");
    const STensor pos_ids = empty({B, T}, DType::i32, "position ids (B, T) i32", MemCategory::data);
    SVar tok = embedding(wte_, idx, "token embeddings (B, T, C)");
    SVar pe = embedding(wpe_, pos_ids, "position embeddings (B, T, C)");
    SVar x = add(tok, pe, "embedding sum, block 0 input (B, T, C)");
    x = dropout(x, drop, "embedding sum after dropout (B, T, C)");
    for (size_t l = 0; l < blocks_.size(); ++l) {
      set_where("block " + std::to_string(l));
      const BlockParams& p = blocks_[l];
      if (!checkpoint_ || !grad_enabled_) {
        x = block(x, p, drop);
        continue;
      }
      x = checkpoint([this, &p, drop](const SVar& in) { return block(in, p, drop); }, x);
    }
    set_where("head");
    x = layer_norm(x, ln_f_w_, ln_f_b_, "ln_f");
    SVar logits = matmul(x, wte_, false, true, "logits (B, T, V)");
    ModelOut out{logits, SVar()};
    if (targets) out.loss = cross_entropy(logits, *targets);
    return out;
  }

  const GptConfig& cfg_;
  GptMemoryOptions opt_;
  const PrecisionSpec& spec_;
  Ledger ledger_;
  bool grad_enabled_ = true;
  bool checkpoint_ = false;
  AutocastState ac_;
  int ac_depth_ = 0;
  std::unordered_map<const SImpl*, STensor> cast_cache_;
  STensor working_;  // the 16-bit working copy of the master weights (*-mixed, after step 1)
  STensor scratch_a_, scratch_b_, scratch_c_, scratch_pad_;
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int, float, bool>, GemmScratchBytes>
      scratch_sizes_;
  std::string where_, step_label_ = "set-up";
  SVar wte_, wpe_, ln_f_w_, ln_f_b_;
  std::vector<BlockParams> blocks_;
};

GptMemoryPrediction Replay::run() {
  GptMemoryPrediction pred;
  const int64_t B = opt_.batch_size, T = opt_.seq_len > 0 ? opt_.seq_len : cfg_.block_size;
  const bool mixed = spec_.autocast && spec_.param_dtype == DType::f32;

  // -- the model (Gpt::Gpt): the parameters declared in the same order, so the flat arenas get
  // the same alignment padding.
  ParameterStore store;
  nn::Embedding wte, wpe;
  std::vector<nn::Block> blocks(static_cast<size_t>(cfg_.n_layer));
  nn::LayerNorm ln_f;
  wte.declare(store, "transformer.wte", cfg_.vocab_size, cfg_.n_embd);
  wpe.declare(store, "transformer.wpe", cfg_.block_size, cfg_.n_embd);
  for (int64_t l = 0; l < cfg_.n_layer; ++l)
    blocks[static_cast<size_t>(l)].declare(store, "transformer.h." + std::to_string(l), cfg_.n_embd,
                                           cfg_.n_head, cfg_.ln_eps);
  ln_f.declare(store, "transformer.ln_f", cfg_.n_embd, cfg_.ln_eps);
  const int64_t flat = store.flat_numel();
  pred.parameters = store.numel();
  pred.flat_parameters = flat;

  ledger_.phase = "set-up";
  // ParameterStore::finalize: the parameters (the fp32 masters in the *-mixed modes, charged as
  // such by the trainer) and the gradient buffer, both for the whole run.
  const STensor params = empty({flat}, spec_.param_dtype,
                               mixed ? "fp32 master weights" : "weights " + dtype_str(spec_.param_dtype),
                               mixed ? MemCategory::master_weights : MemCategory::parameters);
  const STensor grads = empty({flat}, spec_.grad_dtype, "gradient buffer " + dtype_str(spec_.grad_dtype),
                              MemCategory::gradients);
  auto leaf = [&](const std::string& name) {
    const ParamInfo& i = store.info(name);
    Dims s(i.shape.begin(), i.shape.end());
    return SVar::parameter(STensor{params.block, s, spec_.param_dtype},
                           STensor{grads.block, s, spec_.grad_dtype});
  };
  wte_ = leaf("transformer.wte.weight");
  wpe_ = leaf("transformer.wpe.weight");
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l);
    blocks_.push_back({leaf(h + ".ln_1.weight"), leaf(h + ".ln_1.bias"), leaf(h + ".attn.c_attn.weight"),
                       leaf(h + ".attn.c_attn.bias"), leaf(h + ".attn.c_proj.weight"),
                       leaf(h + ".attn.c_proj.bias"), leaf(h + ".ln_2.weight"), leaf(h + ".ln_2.bias"),
                       leaf(h + ".mlp.c_fc.weight"), leaf(h + ".mlp.c_fc.bias"),
                       leaf(h + ".mlp.c_proj.weight"), leaf(h + ".mlp.c_proj.bias")});
  }
  ln_f_w_ = leaf("transformer.ln_f.weight");
  ln_f_b_ = leaf("transformer.ln_f.bias");
  // Gpt::init_weights: each matrix is drawn in an fp32 workspace tensor, then copied in.
  for (const ParamInfo& i : store.infos()) {
    const bool is_bias = i.name.size() > 5 && i.name.substr(i.name.size() - 5) == ".bias";
    const bool is_ln = i.name.find(".ln_") != std::string::npos;
    if (!is_bias && !is_ln) {
      const STensor draw =
          empty({i.numel}, DType::f32, "initial weights drawn in f32", MemCategory::workspace);
    }
  }
  // The optimizer's state (AdamW, SGD constructors), in the parameters' dtype.
  std::vector<STensor> state;
  const bool lowp = spec_.param_dtype != DType::f32;
  const std::string sdt = dtype_str(spec_.param_dtype);
  if (opt_.optimizer == OptimizerKind::adamw) {
    state.push_back(empty({flat}, spec_.param_dtype, "AdamW exp_avg " + sdt, MemCategory::optimizer_state));
    state.push_back(
        empty({flat}, spec_.param_dtype, "AdamW exp_avg_sq " + sdt, MemCategory::optimizer_state));
  } else if (opt_.momentum != 0.f) {
    state.push_back(empty({flat}, spec_.param_dtype, "SGD momentum " + sdt, MemCategory::optimizer_state));
  }
  if (lowp && opt_.update_rounding == UpdateRounding::kahan)
    state.push_back(
        empty({flat}, spec_.param_dtype, "Kahan compensation " + sdt, MemCategory::optimizer_state));

  // -- the steps (train()): steps after the second allocate as the second does.
  checkpoint_ = opt_.checkpoint_activations;
  STensor idx, targets;
  const int64_t steps = std::min<int64_t>(opt_.steps, 2);
  for (int64_t step = 1; step <= steps; ++step) {
    step_label_ = "step " + std::to_string(step);
    for (int64_t micro = 0; micro < opt_.grad_accum; ++micro) {
      if (!idx.defined()) {
        ledger_.phase = step_label_ + " data";
        idx = empty({B, T}, DType::i32, "token batch (B, T) i32", MemCategory::data);
        targets = empty({B, T}, DType::i32, "target batch (B, T) i32", MemCategory::data);
      }
      ModelOut out;
      {
        AutocastRegion region(*this, {spec_.autocast, spec_.compute_dtype, working_.defined()});
        out = forward(idx, &targets, true);
      }
      ledger_.phase = step_label_ + " backward, loss";
      {
        const STensor seed = empty({1}, DType::f32, "loss gradient seed");
        backward_from(out.loss.impl(), seed);
      }
    }
    ledger_.phase = step_label_ + " optimizer";
    if (mixed && !working_.defined())
      working_ = empty({flat}, spec_.compute_dtype,
                       "16-bit working copy of the weights " + dtype_str(spec_.compute_dtype),
                       MemCategory::parameters);
  }
  // -- the final evaluation: no-grad forward passes over a validation batch.
  if (opt_.eval_batches > 0) {
    step_label_ = "evaluation";
    AutocastRegion region(*this, {spec_.autocast, spec_.compute_dtype, working_.defined()});
    NoGrad no_grad(*this);
    const STensor vidx = empty({B, T}, DType::i32, "validation batch (B, T) i32", MemCategory::data);
    const STensor vtargets = empty({B, T}, DType::i32, "validation targets (B, T) i32", MemCategory::data);
    const ModelOut out = forward(vidx, &vtargets, false);
  }
  ledger_.fill(pred);
  return pred;
}

}  // namespace

GptMemoryPrediction predict_gpt_memory(const GptConfig& cfg, const GptMemoryOptions& opt) {
  opt.validate(cfg);
  Replay r(cfg, opt);
  return r.run();
}

}  // namespace mixtrain
