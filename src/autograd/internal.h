// Pieces shared by the forward functions and their backward rules (not public API).
#pragma once
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::autograd {

// The (B, H, T, D) strided view of q (which=0), k (1) or v (2) inside qkv (B, T, 3C).
Tensor heads_view(const Tensor& qkv, int which, int64_t n_head);
// out = x * mask / (1 - p), mask from counter_rng(seed, offset + i).
void apply_dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out);
// Heads per chunk of the attention op, so that the f32 scores (or their gradient) of only one
// chunk exist at a time: about 4 MiB of them, at least one head.
int64_t attention_heads_per_chunk(int64_t T);

}  // namespace mixtrain::autograd
