// The parameter ranges of a ParameterStore as (offset, numel, decay) spans of its flat buffers,
// the unit every flat optimizer kernel iterates. Alignment padding between parameters belongs to
// no span: the optimizers never touch it, so it stays zero.
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/kernels/optimizer_kernels.h"  // FlatSpan, split_spans
#include "mixtrain/nn/parameters.h"

namespace mixtrain {

// One span per parameter, in declaration (= offset) order; empty parameters are left out.
std::vector<FlatSpan> flat_spans(const ParameterStore& store);
// The spans' parts inside `shard`, with offsets counted from shard.begin (the optimizer's state
// and the arena views it updates start there).
std::vector<FlatSpan> shard_spans(const std::vector<FlatSpan>& spans, int64_t begin, int64_t end);

}  // namespace mixtrain
