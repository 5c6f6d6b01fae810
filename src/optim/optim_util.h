// Shared checks and the OpenMP work split of the flat optimizers (private to src/optim).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/flat_spans.h"

namespace mixtrain::optim_detail {

// Work items of at most this many elements: big enough to amortise the loop set-up, small enough
// that a static schedule balances a few large matrices against many small vectors.
constexpr int64_t kPieceNumel = 16384;

// Throws unless the store is finalized with the layout (flat_numel) the optimizer was built for,
// f32 parameters and f32 gradients.
void check_store(const ParameterStore& store, int64_t flat_numel, const char* op);

// "lr must be >= 0 and finite, got -1"-style ArgumentError.
void check_nonneg(const char* op, const char* what, double value);

std::string fmt(double v);  // shortest round-trip form, for messages

}  // namespace mixtrain::optim_detail
