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

}  // namespace mixtrain
