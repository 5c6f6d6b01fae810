// flat_spans / split_spans: the optimizer's view of the parameter arena.
#include "mixtrain/optim/flat_spans.h"

#include <algorithm>

namespace mixtrain {

std::vector<FlatSpan> flat_spans(const ParameterStore& store) {
  std::vector<FlatSpan> spans;
  spans.reserve(store.size());
  for (const ParamInfo& p : store.infos())
    if (p.numel > 0) spans.push_back({p.offset, p.numel, p.weight_decay});
  return spans;
}

std::vector<FlatSpan> split_spans(const std::vector<FlatSpan>& spans, int64_t max_numel) {
  if (max_numel < 1) throw ArgumentError("split_spans: max_numel must be >= 1, got " + std::to_string(max_numel));
  std::vector<FlatSpan> out;
  for (const FlatSpan& s : spans)
    for (int64_t i = 0; i < s.numel; i += max_numel)
      out.push_back({s.offset + i, std::min(max_numel, s.numel - i), s.decay});
  return out;
}

}  // namespace mixtrain
