// The gradient kernels over a flat fp32 gradient buffer, reached through the backend
// (the ops unscale_and_check and global_norm, kernels/optimizer_ops.h):
//
// 1. The fused loss-scale kernel: one pass that unscales (g[i] = g[i] * inv_scale), detects
// inf/NaN, and sums the squares of the unscaled values, so the trainer gets the clipping norm
// without a second pass (torch needs three: unscale_, then the norm inside clip_grad_norm_).
// Used by GradScaler (amp/grad_scaler.h).
//
// Semantics, shared by both entry points below (they return the same bits):
// - Every element becomes exactly fp32(g[i] * inv_scale), like torch's
//   _amp_foreach_non_finite_check_and_unscale_. When inv_scale == 1 nothing is written (torch
//   also skips the multiply then), so a disabled scaler only reads.
// - found_inf: some unscaled element is inf or NaN. That is torch's test (a non-finite input)
//   whenever inv_scale <= 1, i.e. scale >= 1; for scale < 1 it also catches a finite gradient
//   that the multiply pushes past fp32's range, which torch lets through to the optimizer.
// - sum_squares: the sum of the unscaled values squared, with the same blocking as
//   global_norm_f32 (below: fp32 in 4096-element blocks of 16 lanes with a fixed
//   combining tree, the block sums added in double in block order), so sqrt(sum_squares) is
//   bit-identical to global_norm_f32 over the unscaled buffer, for any thread count. It is
//   meaningless when found_inf.
#pragma once
#include <cstdint>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain {

struct UnscaleResult {
  bool found_inf = false;  // an unscaled element is inf or NaN
  double sum_squares = 0;  // sum of unscaled g^2 (see above); n == 0 gives 0
};

// The scalar reference: a plain loop over the blocks (the oracle for the fast path).
UnscaleResult unscale_and_check_ref(float* g, int64_t n, float inv_scale);  // g: (n)

// The fast path: OpenMP over the fixed blocks, AVX-512 inside a block where the CPU has it
// (chosen at run time; the library targets baseline x86-64). Same bits as the reference for any
// thread count. Uses the reference when force_reference() is on.
UnscaleResult unscale_and_check(float* g, int64_t n, float inv_scale);  // g: (n)

// 2. The global L2 norm, sqrt(sum x[i]^2), of a flat f32 array (optim/clip.h has the semantics):
// squares accumulated in fp32 inside fixed 4096-element blocks (16 lanes, a fixed combining
// tree), the block sums added in double in block order, the square root in double. OpenMP over
// the blocks; the result does not depend on the thread count.
double global_norm_f32(const float* x, int64_t n);
double global_norm_ref(const float* x, int64_t n);  // the scalar reference: the same bits

// 3. Sharded gradients (ZeRO, optim/zero.h): each rank holds the summed gradient of one part of
// the arena, so the norm is assembled from per-block partial sums, and only the same blocks added
// in the same order give the same bits as the whole-buffer kernels above. A part must start on a
// block boundary (kGradNormBlock elements) of the whole buffer.
constexpr int64_t kGradNormBlock = 4096;
// The fused unscale of 1. over a part of n elements, writing each block's sum of squares to
// block_sums (ceil(n / kGradNormBlock) doubles); returns found_inf. sum_block_sums over the
// blocks of every part, in order, is unscale_and_check's sum_squares over the whole buffer.
bool unscale_and_check_blocks(float* g, int64_t n, float inv_scale, double* block_sums);
double sum_block_sums(const double* block_sums, int64_t blocks);  // added in block order
// 16-bit gradients (the *-true modes): the per-block fp32 sums of squares that the CPU backend's
// reduce(g, sum_squares) forms (kSumBlock = kGradNormBlock elements per block) for a part of n
// elements of dtype bf16 or f16, and their pairwise combination, which over all blocks of the
// buffer is that reduction's result (its fast path) bit for bit.
void sum_squares_blocks_16(const void* g, DType dtype, int64_t n, float* block_sums);
double combine_sum_squares_blocks_16(const float* block_sums, int64_t blocks);

}  // namespace mixtrain
