// ZeRO stage 3's gathers as a model's forward makes them (nn/parameters.h ParameterGather;
// train/param_shards.h does the gathering): a model that can run sharded names its gather units
// (each transformer block's parameters, and the rest) and runs each block through gathered(), its
// other parameters under a GatherScope. With no gatherer on the store both are plain calls.
//
//   const nn::GatherScope rest(store_, rest_unit_);               // embeddings, final norm, head
//   for (l ...) x = nn::gathered(store_, block_unit_[l], [&](const Var& in) { return block(in); }, x);
#pragma once
#include <functional>
#include <vector>

#include "mixtrain/autograd/functions.h"
#include "mixtrain/nn/parameters.h"

namespace mixtrain::nn {

// The unit of the parameters whose names start with each prefix (one range each, in order).
FlatRanges unit_of(const ParameterStore& s, const std::vector<std::string>& prefixes);
// The arena's ranges outside every one of `units` (a model's other parameters).
FlatRanges rest_of(const ParameterStore& s, const std::vector<FlatRanges>& units);

// The parameters of `unit` made whole for the scope's lifetime. With gradients on they stay
// gathered after it (backward reads them; the run releases them once backward is done); without,
// the scope releases what it gathered at its end.
class GatherScope {
 public:
  GatherScope(const ParameterStore& s, const FlatRanges& unit);
  ~GatherScope();
  GatherScope(const GatherScope&) = delete;
  GatherScope& operator=(const GatherScope&) = delete;

 private:
  ParameterGather* g_ = nullptr;
  const FlatRanges* unit_ = nullptr;
  bool release_ = false;
};

// y = fn(x) with `unit` gathered for it, released after, and, when gradients are recorded,
// gathered again when backward reaches y (before any op inside fn goes back) and released when
// backward has gone through them all (at x). fn reads no parameter outside `unit` but those a
// GatherScope holds.
autograd::Var gathered(const ParameterStore& s, const FlatRanges& unit,
                       const std::function<autograd::Var(const autograd::Var&)>& fn, const autograd::Var& x);

}  // namespace mixtrain::nn
