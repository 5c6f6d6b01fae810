// Shared checks of the flat optimizers (private to src/optim).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/optimizer.h"
#include "optim/flat_spans.h"

namespace mixtrain::optim_detail {

// Throws unless the store is finalized with the layout (flat_numel) the optimizer was built for
// (ArgumentError), parameters of param_dtype and gradients of the same dtype (DTypeError): f32 /
// f32 (32-true and the fp32 masters of the *-mixed modes) or bf16 / bf16, f16 / f16 (*-true).
void check_store(const ParameterStore& store, int64_t flat_numel, DType param_dtype, const char* op);

// The parameter dtype of a finalized store if an optimizer supports it (f32, bf16, f16);
// DTypeError otherwise. The optimizer state is kept in this dtype.
DType optimizer_param_dtype(const ParameterStore& store, const char* op);

// "lr must be >= 0 and finite, got -1"-style ArgumentError.
void check_nonneg(const char* op, const char* what, double value);

// ArgumentError unless r is one of the UpdateRounding values.
void check_rounding(const char* op, UpdateRounding r);

std::string fmt(double v);  // shortest round-trip form, for messages

// Optimizer::restore's checks of a checkpoint's state against this optimizer: its kind, a Kahan
// compensation buffer exactly when this one keeps one, fp32 master weights exactly when it has them.
void check_restore_kind(const Optimizer& o, const OptimizerState& s);
void check_compensation(const Tensor& mine, const OptimizerState& s);
void check_master(bool mine, const OptimizerState& s);

// The elements [shard.begin, shard.end) of a flat (flat_numel) buffer, as a view.
Tensor shard_view(const Tensor& flat, const FlatRange& shard);
// A checkpoint buffer for a shard's state: `t` itself when it has the shard's length, its shard
// elements when it covers the whole arena (flat_numel); otherwise t (the caller's shape check
// names it).
Tensor shard_of(const Tensor& t, const FlatRange& shard, int64_t flat_numel);
// The working copy descriptor moved to the shard's first element.
WorkingCopyOut shard_working(WorkingCopyOut w, const FlatRange& shard);

}  // namespace mixtrain::optim_detail
