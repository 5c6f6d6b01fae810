// Where the numerics probes (train/numerics_hook.h) see every op: after each forward op produces
// its output, and around each backward rule. Autograd sits below train, so it calls whatever
// ProbeHook is installed, like the cast hook (autograd/cast_hook.h). Installed only for the steps
// a probe samples: otherwise every op pays one relaxed load and a branch. A probe only reads.
#pragma once
#include <atomic>
#include <string>

#include "mixtrain/autograd/node.h"

namespace mixtrain::autograd {

class ProbeHook {
 public:
  virtual ~ProbeHook() = default;
  // Forward op `op` (a literal, e.g. "linear") inside `module` (null: outside any module) produced
  // `out`; `node` is the op's recorded node (its inputs' values), null when nothing is recorded.
  virtual void forward_output(const char* op, const std::string* module, const Node* node,
                              const Tensor& out) = 0;
  // Backward is about to run node's rule with grad_out = d(loss)/d(node's output).
  virtual void backward_input(const Node& node, const Tensor& grad_out) = 0;
  // node's rule ran: every input that requires a gradient holds its contribution.
  virtual void backward_done(const Node& node) = 0;
};

namespace detail {
extern std::atomic<ProbeHook*> g_probe_hook;
}
// Installs the process-wide probe (nullptr removes it). The probe must outlive its installation.
inline void set_probe_hook(ProbeHook* hook) { detail::g_probe_hook.store(hook, std::memory_order_relaxed); }
inline ProbeHook* probe_hook() { return detail::g_probe_hook.load(std::memory_order_relaxed); }

// Installs a probe for a scope and restores the previous one.
class ScopedProbe {
 public:
  explicit ScopedProbe(ProbeHook* hook) : saved_(probe_hook()) { set_probe_hook(hook); }
  ~ScopedProbe() { set_probe_hook(saved_); }
  ScopedProbe(const ScopedProbe&) = delete;
  ScopedProbe& operator=(const ScopedProbe&) = delete;

 private:
  ProbeHook* saved_;
};

}  // namespace mixtrain::autograd
