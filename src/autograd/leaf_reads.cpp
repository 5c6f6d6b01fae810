// The leaf-read observer (autograd/leaf_reads.h).
#include "autograd/leaf_reads.h"

namespace mixtrain::autograd {
namespace {
thread_local const LeafReadObserver* t_observer = nullptr;
}  // namespace

LeafReadScope::LeafReadScope(LeafReadObserver observer) : observer_(std::move(observer)), prev_(t_observer) {
  t_observer = &observer_;
}

LeafReadScope::~LeafReadScope() { t_observer = prev_; }

void note_leaf_read(const Var& v) {
  if (t_observer == nullptr || !v.defined() || !v.requires_grad() || v.impl()->grad_fn != nullptr) return;
  (*t_observer)(v.value());
}

}  // namespace mixtrain::autograd
