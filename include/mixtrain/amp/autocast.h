// Autocast: inside an AutocastScope every autograd op casts its inputs according to one per-op
// policy table (amp/autocast_policy.cpp), as torch.autocast does (shared/reference/
// amp-semantics.md, "torch.autocast"): the GEMM family runs in the 16-bit dtype, normalisation,
// softmax and the loss in fp32, binary elementwise ops in the widest input type, the rest in the
// type of their inputs. The casts are recorded as differentiable cast ops, so backward runs each
// op in the dtype forward chose and gradients reach fp32 parameters in fp32.
//
// Weight-cast cache: the 16-bit copy of an fp32 parameter (a leaf that requires grad) is made
// once per outermost region and reused; unlike torch, an entry remembers the Storage version of
// the parameter and is recast after an in-place update (Storage::bump_version), and casts made
// under NoGradGuard are never cached (pytorch#112583).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/autograd/node.h"
#include "mixtrain/tensor/dtype.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// RAII region, nestable, thread-local (like `with torch.autocast(...)`). Entering installs
// autocast as autograd's cast hook (autograd/cast_hook.h), saves the thread's (enabled, dtype,
// cache flag) and sets them; leaving (also by an exception) restores them; leaving the outermost
// scope clears the weight-cast cache. enabled=false inside an enabled region runs in fp32:
// 16-bit inputs that come from outside are cast up.
// dtype must be bf16 or f16 when enabled (ArgumentError otherwise).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled, DType dtype = DType::bf16, bool cache_enabled = true);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
  bool prev_upcast_;
};

bool autocast_enabled();        // this thread is inside an enabled region
DType autocast_dtype();         // the lower-precision dtype of the innermost region (bf16 outside any)
bool autocast_cache_enabled();  // the innermost region's cache flag (true outside any)
int autocast_depth();           // nesting depth of AutocastScopes on this thread (enabled or not)

// What autocast does to an op's floating (non-f64) inputs.
enum class CastPolicy : uint8_t {
  lower_precision,  // cast to the autocast dtype (GEMM family)
  fp32,             // cast to f32 (normalisation, softmax, losses, exp/log/sum-like ops)
  promote,          // cast to the widest input type (binary elementwise)
  keep,             // run in the input's type (shape ops, pointwise ops, explicit casts)
};
std::string_view cast_policy_name(CastPolicy p);

// The policy table: one entry per autograd op (amp/autocast_policy.cpp).
CastPolicy autocast_policy(autograd::OpKind op);

// What autograd's cast hook (autograd/cast_hook.h, installed by the first AutocastScope) runs at
// the top of every autograd op: when this thread's autocast is active, replaces each defined, floating,
// non-f64 input by its cast under `op`'s policy. A no-op outside any region. Inputs not eligible (i32, f64,
// undefined) are left alone. The output dtype of an op whose input has dtype `input`: f32 for the fp32-policy
// ops on 16-bit inputs inside an autocast region (they widen inside their kernels), else `input`.
DType autocast_output_dtype(autograd::OpKind op, DType input);
// The output dtype of a promote-policy op (add, mul) on inputs of dtypes a and b inside an active
// region: the wider (bf16 with f16: f32), computed by the kernel from both storages; else a.
DType autocast_promote_dtype(DType a, DType b);
void autocast_inputs(autograd::OpKind op, std::initializer_list<autograd::Var*> inputs);
// Whether autocast_inputs would do anything on this thread (cheap; checked before calling it).
bool autocast_active();

// Per-site override: the GEMM-family ops of a module whose path (tensor/alloc_site.h, e.g.
// "transformer.h.5.mlp.c_proj") or one of whose ancestors' paths matches one of these globs
// (fnmatch: `*` also matches dots) run in fp32 inside an enabled region, as if autocast were off
// there. Process-wide; set before training, not while ops run. Empty: none.
void set_autocast_keep_fp32(std::vector<std::string> patterns);
const std::vector<std::string>& autocast_keep_fp32();
// Whether `module_path` is kept in fp32 by the patterns (the rule above).
bool keep_fp32_matches(const std::vector<std::string>& patterns, const std::string& module_path);

// Registers, for this thread and the scope's lifetime, a 16-bit working copy of an fp32
// parameter arena (optim/working_copy.h): while `master`'s storage still has `version` (nothing
// has written the masters since the copy was made), autocast hands out views of `copy` as the
// casts of the parameters inside `master` instead of casting them. Nestable; an undefined copy
// registers nothing. Casts served this way count as cache hits.
class WorkingCopyScope {
 public:
  WorkingCopyScope(const Tensor& master, uint64_t version, const Tensor& copy);
  ~WorkingCopyScope();
  WorkingCopyScope(const WorkingCopyScope&) = delete;
  WorkingCopyScope& operator=(const WorkingCopyScope&) = delete;

 private:
  friend Tensor working_copy_view(const autograd::Var& x, DType target);
  friend struct AutocastState current_autocast_state();
  Tensor master_;  // the flat fp32 arena the copy mirrors
  uint64_t version_;
  Tensor copy_;  // flat, 16-bit, master's layout
  const WorkingCopyScope* prev_;
};
// The registered working copy's view that stands for parameter x cast to `target`, or an
// undefined tensor when no current copy covers x (used by autocast's casts; public for tests).
Tensor working_copy_view(const autograd::Var& x, DType target);

// This thread's autocast state (the innermost region's flags and working copy), to run code again
// later exactly as it ran now (activation checkpointing recomputes a block in backward).
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;
  bool cache_enabled = true;
  Tensor master, copy;  // the working copy, undefined if none
  uint64_t version = 0;
};
AutocastState current_autocast_state();
// Re-enters a captured state for its lifetime (outside any other region: upcast regions are not
// captured).
class AutocastStateScope {
 public:
  explicit AutocastStateScope(const AutocastState& s)
      : autocast_(s.enabled, s.dtype, s.cache_enabled), working_(s.master, s.version, s.copy) {}

 private:
  AutocastScope autocast_;
  WorkingCopyScope working_;
};

// Counters of this thread's weight-cast cache (for tests and the memory report). hits and misses
// are cumulative over the thread's life; entries and bytes describe the cache now.
struct AutocastCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;   // bytes of cached copies (also charged to MemCategory::cast_cache)
  int64_t hits = 0;    // lookups answered from the cache
  int64_t misses = 0;  // cacheable casts that had to be made (first use, or a stale version)
};
AutocastCacheStats autocast_cache_stats();

// The lowest element offset within `storage` of a parameter (an fp32 leaf that requires grad) this
// thread's autocast has cast to 16 bits, from its cache or a working copy, while that storage
// lives; -1 when none. Where a working copy of that arena must start to serve every cast seen so far
// (optim/mixed_precision.h: embedding tables, which autocast runs in fp32, lead the encoder's
// arena and get no copy).
int64_t autocast_lowest_cast_offset(const Storage* storage);

}  // namespace mixtrain
