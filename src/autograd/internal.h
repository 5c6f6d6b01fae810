// Pieces shared by the forward functions and their backward rules (not public API).
#pragma once
#include <vector>

#include "kernels/attention_ops.h"  // the blocked attention, heads_copy, dropout_mask
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::autograd {

// The (B, H, T, D) strided view of q (which=0), k (1) or v (2) inside qkv (B, T, 3C).
Tensor heads_view(const Tensor& qkv, int which, int64_t n_head);
}  // namespace mixtrain::autograd
