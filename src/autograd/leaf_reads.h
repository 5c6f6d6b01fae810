// Which parameters the ops read as they are, not through a cast: every op tells the installed
// observer about each leaf input (a parameter: requires grad, no grad_fn) that it is about to read
// after autocast has replaced its inputs, and a cast op about the leaf it converts. ZeRO-3
// (train/param_shards.h) learns from this which fp32 masters the *-mixed modes read (layer norms,
// embeddings, anything --keep-fp32 keeps; the GEMMs read the 16-bit working copy instead) and
// gathers a master before the op reads it. With no observer installed nothing is asked.
//
//   const autograd::LeafReadScope scope([&](const Tensor& value) { ... });  // this thread's ops
#pragma once
#include <functional>

#include "mixtrain/autograd/variable.h"

namespace mixtrain::autograd {

using LeafReadObserver = std::function<void(const Tensor& value)>;

// Installs `observer` for this thread's ops for the scope's lifetime (nestable: the previous one
// is restored).
class LeafReadScope {
 public:
  explicit LeafReadScope(LeafReadObserver observer);
  ~LeafReadScope();
  LeafReadScope(const LeafReadScope&) = delete;
  LeafReadScope& operator=(const LeafReadScope&) = delete;

 private:
  LeafReadObserver observer_;
  const LeafReadObserver* prev_;
};

// Called by the ops: tells the observer, if any, about v when it is a leaf that requires grad.
void note_leaf_read(const Var& v);

}  // namespace mixtrain::autograd
