// The parameter ranges of a ParameterStore as (offset, numel, decay) spans of its flat buffers,
// the unit every flat optimizer kernel iterates. Alignment padding between parameters belongs to
// no span: the optimizers never touch it, so it stays zero.
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/nn/parameters.h"

namespace mixtrain {

struct FlatSpan {
  int64_t offset = 0;  // in elements, into flat_params() / flat_grads() / the optimizer state
  int64_t numel = 0;
  bool decay = true;   // ParamInfo::weight_decay
};

// One span per parameter, in declaration (= offset) order; empty parameters are left out.
std::vector<FlatSpan> flat_spans(const ParameterStore& store);

// The same ranges cut into pieces of at most max_numel elements: the work items an OpenMP
// static schedule hands out (many small biases and a few large matrices balance out).
std::vector<FlatSpan> split_spans(const std::vector<FlatSpan>& spans, int64_t max_numel);

}  // namespace mixtrain
