// Where an allocation happens, by name: the module that runs (e.g. "transformer.h.3.mlp.c_fc", set
// by the nn layers) and the op (e.g. "linear", set by autograd; in backward, the op whose gradient
// is computed). Only the meta device reads it (to say which tensors are alive at a predicted
// peak); elsewhere it costs two thread-local stores per op. The strings are not copied: a module
// path must outlive its scopes (the layers own theirs), an op name must be a literal.
#pragma once
#include <cstdint>
#include <string>

namespace mixtrain {

struct AllocSite {
  const std::string* module = nullptr;  // null: outside any named module
  const char* op = nullptr;             // null: outside any op
  bool backward = false;                // the op's backward rule runs
  bool recompute = false;               // activation checkpointing runs a forward again in backward
  int64_t step = 0;                     // the optimizer step a TrainingRun is in (0: before the first)
  const char* phase = nullptr;          // what the run does: "forward", "optimizer update", "evaluation"
};

inline AllocSite& alloc_site() {
  thread_local AllocSite site;
  return site;
}

// Sets the whole site (autograd's backward walk restores a node's recorded module with its op).
class ScopedAllocSite {
 public:
  explicit ScopedAllocSite(AllocSite s) : saved_(alloc_site()) { alloc_site() = s; }
  ~ScopedAllocSite() { alloc_site() = saved_; }
  ScopedAllocSite(const ScopedAllocSite&) = delete;
  ScopedAllocSite& operator=(const ScopedAllocSite&) = delete;

 private:
  AllocSite saved_;
};

// Names the phase of a training step (keeps the rest).
class ScopedPhase {
 public:
  ScopedPhase(int64_t step, const char* phase) : saved_(alloc_site()) {
    alloc_site().step = step;
    alloc_site().phase = phase;
  }
  ~ScopedPhase() {
    alloc_site().step = saved_.step;
    alloc_site().phase = saved_.phase;
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  AllocSite saved_;
};

// Names the module (keeps the op); a forward op inside it then names itself with ScopedOp.
class ScopedModule {
 public:
  explicit ScopedModule(const std::string& module) : saved_(alloc_site().module) {
    alloc_site().module = &module;
  }
  ~ScopedModule() { alloc_site().module = saved_; }
  ScopedModule(const ScopedModule&) = delete;
  ScopedModule& operator=(const ScopedModule&) = delete;

 private:
  const std::string* saved_;
};

// Names the op (keeps the module); the innermost op names what it allocates (autocast's casts
// inside a linear are "cast").
class ScopedOp {
 public:
  explicit ScopedOp(const char* op) : saved_(alloc_site().op) { alloc_site().op = op; }
  ~ScopedOp() { alloc_site().op = saved_; }
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;

 private:
  const char* saved_;
};

}  // namespace mixtrain
