// The one place a precision policy reaches into the autograd ops. Autograd sits below amp, so it
// does not call autocast: it calls whatever CastHook is installed, and amp installs autocast's
// (amp/autocast.h; every AutocastScope installs it when entered, so any program that can have an
// active autocast region has it). With no hook installed every op runs in its inputs' dtypes,
// which is exactly what autocast does outside a region. Same arrangement as torch, where autocast
// is a dispatch key the ops are routed through rather than code inside each op.
#pragma once
#include <functional>
#include <initializer_list>

#include "mixtrain/autograd/node.h"

namespace mixtrain::autograd {

class CastHook {
 public:
  virtual ~CastHook() = default;
  // Whether the policy changes anything on this thread now. Cheap: every op asks first, and asks
  // nothing else when it is false.
  virtual bool active() const = 0;
  // Called at the top of op `op` with its inputs (undefined Vars included): replaces any input by
  // its cast, recorded as a differentiable cast op, so the node the op records sees the cast
  // values and backward runs in the dtype forward chose.
  virtual void cast_inputs(OpKind op, std::initializer_list<Var*> inputs) const = 0;
  // The output dtype of `op` on an input of dtype `input` (an op may widen inside its kernel
  // instead of casting its input).
  virtual DType output_dtype(OpKind op, DType input) const = 0;
  // The output dtype of a binary elementwise op (add, mul) on inputs of dtypes a and b.
  virtual DType promote_dtype(DType a, DType b) const = 0;
  // The dtype the lower-precision ops run in now (bf16 or f16), or f32 when none do: layer_norm
  // saves x-hat for backward in it.
  virtual DType compute_dtype() const = 0;
  // fn bound to this thread's policy state now, so activation checkpointing recomputes a block in
  // backward exactly as forward ran it.
  virtual std::function<Var(const Var&)> bind_state(std::function<Var(const Var&)> fn) const = 0;
};

// Installs the process-wide hook (nullptr removes it); the hook keeps its own per-thread state.
// The hook must outlive every op that may call it (amp's is a static).
void set_cast_hook(const CastHook* hook);
const CastHook* cast_hook();

}  // namespace mixtrain::autograd
