// ZeRO-3's gathers around a model's units (nn/gather.h).
#include "mixtrain/nn/gather.h"

#include <algorithm>

namespace mixtrain::nn {

FlatRanges unit_of(const ParameterStore& s, const std::vector<std::string>& prefixes) {
  FlatRanges u;
  for (const std::string& p : prefixes) u.push_back(s.range_of(p));
  return u;
}

FlatRanges rest_of(const ParameterStore& s, const std::vector<FlatRanges>& units) {
  FlatRanges taken;
  for (const FlatRanges& u : units) taken.insert(taken.end(), u.begin(), u.end());
  std::sort(taken.begin(), taken.end());
  FlatRanges rest;
  int64_t at = 0;
  for (const auto& [b, e] : taken) {
    if (b > at) rest.push_back({at, b});
    at = std::max(at, e);
  }
  if (at < s.flat_numel()) rest.push_back({at, s.flat_numel()});
  return rest;
}

GatherScope::GatherScope(const ParameterStore& s, const FlatRanges& unit) : g_(s.gather()), unit_(&unit) {
  if (g_ == nullptr || g_->is_gathered(unit)) return;
  g_->gather(unit);
  release_ = !autograd::grad_enabled();
}

GatherScope::~GatherScope() {
  if (release_) g_->release(*unit_);
}

autograd::Var gathered(const ParameterStore& s, const FlatRanges& unit,
                       const std::function<autograd::Var(const autograd::Var&)>& fn, const autograd::Var& x) {
  ParameterGather* g = s.gather();
  if (g == nullptr) return fn(x);
  if (!autograd::grad_enabled()) {
    g->gather(unit);
    autograd::Var y = fn(x);
    g->release(unit);
    return y;
  }
  // Backward meets the hook on y first (gather), the one on x last (release).
  const autograd::Var in = autograd::backward_hook(x, [g, unit] { g->release(unit); });
  g->gather(unit);
  autograd::Var y = fn(in);
  g->release(unit);
  return autograd::backward_hook(y, [g, unit] { g->gather(unit); });
}

}  // namespace mixtrain::nn
