// Autocast state (thread-local, nestable, as torch/amp/autocast_mode.py), the input casts every
// autograd op asks for, and the weight-cast cache (aten/src/ATen/autocast_mode.cpp cached_cast,
// minus its two traps: stale copies after in-place updates, and no-grad copies, #112583).
#include "mixtrain/amp/autocast.h"

#include <fnmatch.h>

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>

#include "autograd/cast_hook.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/core/error.h"
#include "tensor/alloc_site.h"

namespace mixtrain {
namespace {

using autograd::Var;
using autograd::VarImpl;

struct State {
  bool enabled = false;
  DType dtype = DType::bf16;
  bool cache_enabled = true;
  // An enabled=false region nested (at any depth) in an enabled one: ops run in fp32, so the
  // lower-precision policy targets f32 and 16-bit inputs from the outer region are cast up.
  bool upcast = false;
  int depth = 0;
};
thread_local State t_state;

// One cached 16-bit copy of a parameter. The key's raw pointer is only compared while `source`
// still points at it (the weak_ptr also keeps the address from being reused meanwhile); the
// storage, offset and version say whether the copy still matches the parameter's values.
struct CacheEntry {
  std::weak_ptr<VarImpl> source;
  const Storage* storage = nullptr;
  int64_t offset = 0;
  uint64_t version = 0;
  Tensor value;  // charged to MemCategory::cast_cache
};
struct CacheKey {
  const VarImpl* impl;
  DType dtype;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.impl) ^ (static_cast<size_t>(k.dtype) * 0x9e3779b97f4a7c15ULL);
  }
};
struct Cache {
  std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> map;
  int64_t hits = 0, misses = 0;
};
thread_local Cache t_cache;
// Per arena storage, the lowest offset of a parameter cast (autocast_lowest_cast_offset). The weak
// reference tells a live storage from a freed one whose address a new storage took: that one
// starts afresh (a run's working copy, and so its memory, must not depend on an earlier run's).
struct LowestCast {
  std::weak_ptr<Storage> storage;
  int64_t offset = 0;
};
thread_local std::unordered_map<const Storage*, LowestCast> t_lowest_cast;

thread_local const WorkingCopyScope* t_working = nullptr;

// --keep-fp32: the patterns, a generation that changes with them, and each thread's verdicts per
// module path (the layers own their path strings, so the pointer identifies the module).
std::vector<std::string> g_keep_fp32;
std::atomic<uint64_t> g_keep_generation{0};
struct KeepCache {
  uint64_t generation = ~uint64_t{0};
  std::unordered_map<const std::string*, bool> kept;
};
thread_local KeepCache t_keep;

// Whether the op running now belongs to a module kept in fp32.
bool kept_in_fp32() {
  if (g_keep_fp32.empty()) return false;
  const std::string* module = alloc_site().module;
  if (module == nullptr) return false;
  const uint64_t gen = g_keep_generation.load(std::memory_order_relaxed);
  if (t_keep.generation != gen) {
    t_keep.kept.clear();
    t_keep.generation = gen;
  }
  auto [it, fresh] = t_keep.kept.try_emplace(module, false);
  if (fresh) it->second = keep_fp32_matches(g_keep_fp32, *module);
  return it->second;
}

bool eligible_dtype(DType t) { return is_floating(t) && t != DType::f64; }
bool eligible(const Var& v) { return v.defined() && eligible_dtype(v.dtype()); }

// torch's type promotion among the eligible float types: the wider format wins; two different
// formats of the same width (bf16 and f16) meet in f32.
DType wider(DType a, DType b) {
  if (a == b) return a;
  if (dtype_size(a) != dtype_size(b)) return dtype_size(a) > dtype_size(b) ? a : b;
  return DType::f32;
}

bool matches(const CacheEntry& e, const Var& x) {
  const Tensor& v = x.value();
  const std::shared_ptr<VarImpl> src = e.source.lock();
  return src.get() == x.impl().get() && e.storage == v.storage().get() && e.offset == v.offset() &&
         e.version == v.storage()->version() && e.value.shape() == v.shape();
}

// The output of a cast node whose input is the parameter leaf and whose value is the cached copy:
// a fresh node per use, so every graph built in the region routes its own gradient to the
// parameter (cast backward: back to f32, accumulated into the fp32 gradient buffer).
Var cast_from_cache(const Var& x, const Tensor& cached) {
  if (!autograd::grad_enabled()) return Var(cached, false);
  auto n = std::make_shared<autograd::Node>();
  n->op = autograd::OpKind::cast;
  n->inputs = {x.impl()};
  Var out(cached, true);
  out.impl()->grad_fn = std::move(n);
  out.impl()->param_cast = true;  // a fresh Var per use: the op that asked is its only consumer
  return out;
}

Var autocast_cast(const Var& x, DType target) {
  const State& s = t_state;
  // Only the 16-bit copy of an fp32 leaf that requires grad (a parameter) is worth keeping.
  const bool cacheable = s.cache_enabled && is_low_precision(target) && x.dtype() == DType::f32 &&
                         x.requires_grad() && x.impl()->grad_fn == nullptr && x.value().storage() != nullptr;
  if (!cacheable) return autograd::cast(x, target);
  {
    const std::shared_ptr<Storage>& st = x.value().storage();
    LowestCast& e = t_lowest_cast[st.get()];
    if (e.storage.expired())
      e = {st, x.value().offset()};
    else if (x.value().offset() < e.offset)
      e.offset = x.value().offset();
  }
  if (Tensor w = working_copy_view(x, target); w.defined()) {
    ++t_cache.hits;
    return cast_from_cache(x, w);
  }
  const CacheKey key{x.impl().get(), target};
  auto it = t_cache.map.find(key);
  if (it != t_cache.map.end() && matches(it->second, x)) {
    ++t_cache.hits;
    return cast_from_cache(x, it->second.value);
  }
  // A cast made with gradients off has no autograd link to the parameter; caching it would hand
  // the unlinked copy to later, recording uses (pytorch#112583).
  if (!autograd::grad_enabled()) return autograd::cast(x, target);
  ++t_cache.misses;
  CacheEntry e;
  e.source = x.impl();
  e.storage = x.value().storage().get();
  e.offset = x.value().offset();
  e.version = x.value().storage()->version();
  e.value = x.value().to(target, MemCategory::cast_cache);
  Tensor value = e.value;
  t_cache.map.insert_or_assign(key, std::move(e));  // a stale entry's copy is dropped here
  return cast_from_cache(x, value);
}

// Autocast as autograd's cast hook (autograd/cast_hook.h): every op asks it through there.
class AutocastHook final : public autograd::CastHook {
 public:
  bool active() const override { return autocast_active(); }
  void cast_inputs(autograd::OpKind op, std::initializer_list<Var*> inputs) const override {
    autocast_inputs(op, inputs);
  }
  DType output_dtype(autograd::OpKind op, DType input) const override {
    return autocast_output_dtype(op, input);
  }
  DType promote_dtype(DType a, DType b) const override { return autocast_promote_dtype(a, b); }
  DType compute_dtype() const override { return t_state.enabled ? t_state.dtype : DType::f32; }
  std::function<Var(const Var&)> bind_state(std::function<Var(const Var&)> fn) const override {
    const AutocastState state = current_autocast_state();
    return [fn = std::move(fn), state](const Var& in) {
      AutocastStateScope scope(state);
      return fn(in);
    };
  }
};
const AutocastHook kAutocastHook;

}  // namespace

AutocastScope::AutocastScope(bool enabled, DType dtype, bool cache_enabled)
    : prev_enabled_(t_state.enabled),
      prev_dtype_(t_state.dtype),
      prev_cache_enabled_(t_state.cache_enabled),
      prev_upcast_(t_state.upcast) {
  if (enabled && dtype != DType::bf16 && dtype != DType::f16)
    throw ArgumentError("autocast: dtype must be bf16 or f16, got " + std::string(dtype_name(dtype)));
  // Only a region can make autocast act, so entering one is where the ops get routed through it
  // (cheap, and idempotent: no static initializer that a static link could drop).
  autograd::set_cast_hook(&kAutocastHook);
  State& s = t_state;
  s.upcast = !enabled && (s.enabled || s.upcast);
  s.enabled = enabled;
  s.dtype = dtype;
  s.cache_enabled = cache_enabled;
  ++s.depth;
}

AutocastScope::~AutocastScope() {
  State& s = t_state;
  // As torch: the cache lives until the outermost region (enabled or not) exits.
  if (--s.depth == 0) t_cache.map.clear();
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  s.cache_enabled = prev_cache_enabled_;
  s.upcast = prev_upcast_;
}

WorkingCopyScope::WorkingCopyScope(const Tensor& master, uint64_t version, const Tensor& copy)
    : master_(master), version_(version), copy_(copy), prev_(t_working) {
  if (!copy.defined()) return;
  if (master.dtype() != DType::f32 || !is_low_precision(copy.dtype()) || copy.numel() != master.numel() ||
      !master.is_contiguous() || !copy.is_contiguous())
    throw ArgumentError("WorkingCopyScope: the copy " + copy.to_string() + " does not mirror the f32 arena " +
                        master.to_string());
  t_working = this;
}

WorkingCopyScope::~WorkingCopyScope() { t_working = prev_; }

Tensor working_copy_view(const Var& x, DType target) {
  const WorkingCopyScope* w = t_working;
  if (!w || w->copy_.dtype() != target || x.dtype() != DType::f32) return Tensor();
  const Tensor& v = x.value();
  const Storage* st = v.storage().get();
  if (st == nullptr || st != w->master_.storage().get() || st->version() != w->version_ || !v.is_contiguous())
    return Tensor();
  const int64_t rel = v.offset() - w->master_.offset();
  if (rel < 0 || rel + v.numel() > w->master_.numel()) return Tensor();
  return w->copy_.as_strided(v.shape(), contiguous_strides(v.shape()), rel);
}

AutocastState current_autocast_state() {
  AutocastState s;
  s.enabled = t_state.enabled;
  s.dtype = t_state.dtype;
  s.cache_enabled = t_state.cache_enabled;
  if (const WorkingCopyScope* w = t_working; w && w->copy_.defined()) {
    s.master = w->master_;
    s.copy = w->copy_;
    s.version = w->version_;
  }
  return s;
}

bool autocast_enabled() { return t_state.enabled; }
DType autocast_dtype() { return t_state.dtype; }
bool autocast_cache_enabled() { return t_state.cache_enabled; }
int autocast_depth() { return t_state.depth; }
bool autocast_active() { return t_state.enabled || t_state.upcast; }

void autocast_inputs(autograd::OpKind op, std::initializer_list<Var*> inputs) {
  const State& s = t_state;
  if (!(s.enabled || s.upcast)) return;
  DType target = DType::f32;
  switch (autocast_policy(op)) {
    case CastPolicy::keep:
      return;
    case CastPolicy::lower_precision:
      target = s.enabled && !kept_in_fp32() ? s.dtype : DType::f32;
      break;
    case CastPolicy::fp32:
      // Every fp32-policy op (layer norm, softmax, the loss) reads 16-bit storage and computes in
      // fp32 inside its kernel, and writes an fp32 output (autocast_output_dtype): the same
      // numbers as torch's materialised input cast (widening is exact; the input gradient is
      // rounded to the input's dtype once, as the cast's backward would), without keeping an
      // fp32 copy of the input alive for backward.
      return;
    case CastPolicy::promote: {
      // Two floating inputs of different widths: the kernel reads both storages and computes in
      // fp32, writing the promoted dtype (autocast_promote_dtype): the numbers of torch's
      // widening cast without materialising the wider copy.
      if (inputs.size() == 2 && eligible(**inputs.begin()) && eligible(**(inputs.begin() + 1))) return;
      bool any = false;
      for (const Var* v : inputs)
        if (eligible(*v)) {
          target = any ? wider(target, v->dtype()) : v->dtype();
          any = true;
        }
      if (!any) return;
      break;
    }
  }
  for (Var* v : inputs)
    if (eligible(*v) && v->dtype() != target) *v = autocast_cast(*v, target);
}

DType autocast_output_dtype(autograd::OpKind op, DType input) {
  const State& s = t_state;
  if (!(s.enabled || s.upcast) || autocast_policy(op) != CastPolicy::fp32) return input;
  return (input == DType::bf16 || input == DType::f16) ? DType::f32 : input;
}

DType autocast_promote_dtype(DType a, DType b) {
  const State& s = t_state;
  if (!(s.enabled || s.upcast)) return a;
  return eligible_dtype(a) && eligible_dtype(b) ? wider(a, b) : a;
}

void set_autocast_keep_fp32(std::vector<std::string> patterns) {
  g_keep_fp32 = std::move(patterns);
  g_keep_generation.fetch_add(1, std::memory_order_relaxed);
}
const std::vector<std::string>& autocast_keep_fp32() { return g_keep_fp32; }

bool keep_fp32_matches(const std::vector<std::string>& patterns, const std::string& module_path) {
  // The path itself, then each ancestor: "a.b.c" -> "a.b" -> "a".
  for (size_t end = module_path.size(); end != std::string::npos && end > 0;
       end = module_path.rfind('.', end - 1)) {
    const std::string prefix = module_path.substr(0, end);
    for (const std::string& p : patterns)
      if (::fnmatch(p.c_str(), prefix.c_str(), 0) == 0) return true;
  }
  return false;
}

int64_t autocast_lowest_cast_offset(const Storage* storage) {
  const auto it = t_lowest_cast.find(storage);
  return it == t_lowest_cast.end() || it->second.storage.expired() ? -1 : it->second.offset;
}

AutocastCacheStats autocast_cache_stats() {
  AutocastCacheStats st;
  st.entries = static_cast<int64_t>(t_cache.map.size());
  for (const auto& [k, e] : t_cache.map) st.bytes += static_cast<int64_t>(e.value.nbytes());
  st.hits = t_cache.hits;
  st.misses = t_cache.misses;
  return st;
}

}  // namespace mixtrain
