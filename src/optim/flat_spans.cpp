// flat_spans: the optimizer's view of the parameter arena.
#include "optim/flat_spans.h"

#include <algorithm>

namespace mixtrain {

std::vector<FlatSpan> flat_spans(const ParameterStore& store) {
  std::vector<FlatSpan> spans;
  spans.reserve(store.size());
  for (const ParamInfo& p : store.infos())
    if (p.numel > 0) spans.push_back({p.offset, p.numel, p.weight_decay});
  return spans;
}

std::vector<FlatSpan> shard_spans(const std::vector<FlatSpan>& spans, int64_t begin, int64_t end) {
  std::vector<FlatSpan> out;
  for (const FlatSpan& s : spans) {
    const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, end);
    if (lo < hi) out.push_back({lo - begin, hi - lo, s.decay});
  }
  return out;
}

}  // namespace mixtrain
