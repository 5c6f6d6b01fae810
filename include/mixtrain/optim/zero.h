// ZeRO stage 1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", the P_os stage; DeepSpeed's `zero_optimization.stage: 1`): the optimizer
// state is split over the ranks of a data-parallel run. Rank r owns one contiguous part of the
// flat parameter arena (nn/parameters.h), keeps the optimizer state for that part only, and
// updates only that part; the updated weights are then all-gathered so every rank again holds
// the whole model. The gradient side (a reduce-scatter instead of the all-reduce, so each rank
// receives the summed gradient of its own part) is train/data_parallel.h's; the global norm and
// the non-finite check over the parts are MixedPrecision::prepare_step_sharded's.
//
//   ZeroPartition part = zero_partition(store.flat_numel(), world.size(), world.rank());
//   ZeroOptimizer opt(store, {.lr = 1e-3f}, world);   // state for part.mine() only
//   mp.apply_step(opt, store, lr);                     // update of the part, then the all-gather
//
// The parts: equal ranges of the arena, each a multiple of kGradNormBlock (4096) elements except
// the last, which takes the rest (so the last rank may own fewer elements, or none). They start
// on the gradient-norm kernel's block boundaries, so the norm assembled from every rank's
// per-block sums is the whole-buffer norm bit for bit (kernels/gradient_kernels.h).
//
// What is sharded: the optimizer state (AdamW m, v; SGD's momentum; the Kahan compensation of
// the *-true modes; the fp32 master weights of their master rounding, DeepSpeed's layout: a
// 16-bit model, each rank holding the fp32 masters of its part only) and the update. Not sharded: the weights
// every forward pass reads. In the
// *-mixed modes those are the fp32 arena itself (autocast's fp32 ops, layer norm, biases and
// embeddings, read it directly, and its 16-bit working copy feeds the GEMMs), so the fp32
// masters stay whole on every rank, gathered in fp32 after each update, and the working copy
// outside this rank's part is rounded from them (the same bits the optimizer writes).
//
// ZeRO stage 2 uses the same partition and optimizer; what differs is the gradient side: the
// store's gradient buffer holds this rank's part only (nn/parameters.h GradientPartScope, with
// zero_partition's part) and data parallelism reduces each bucket from a buffer of its own
// (train/data_parallel.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "mixtrain/dist/communicator.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain {

// Which rank owns which elements of a flat arena of flat_numel elements.
struct ZeroPartition {
  int rank = 0;
  std::vector<FlatRange> shards;  // one per rank, contiguous, in rank order, covering the arena
  const FlatRange& mine() const { return shards[static_cast<size_t>(rank)]; }
  int ranks() const { return static_cast<int>(shards.size()); }
  // Gradient-norm blocks (kernels/gradient_kernels.h) in rank r's part, and before it.
  int64_t blocks(int r) const;
  int64_t first_block(int r) const;
  int64_t total_blocks() const { return first_block(ranks()); }
};
// Rank r of `ranks`: [r*S, (r+1)*S) clipped to the arena, S = ceil(flat_numel / (ranks * 4096))
// * 4096. ArgumentError unless ranks >= 1 and 0 <= rank < ranks.
ZeroPartition zero_partition(int64_t flat_numel, int ranks, int rank);

// AdamW or SGD (make_optimizer) over this rank's part, plus the all-gather of the weights.
class ZeroOptimizer final : public Optimizer {
 public:
  // The store must be finalized; `world` must outlive the optimizer.
  ZeroOptimizer(const ParameterStore& store, const OptimizerConfig& config, Communicator& world);

  OptimizerKind kind() const override { return inner_->kind(); }
  // The update of this rank's part (and of its slice of the working copy), then the all-gather
  // of the weights (in the arena's dtype) and, with a working copy, its other parts rounded from
  // the gathered masters. A collective: every rank calls it for the same steps.
  void step(ParameterStore& store, float lr, Tensor* working = nullptr) override;
  int64_t steps() const override { return inner_->steps(); }
  DType param_dtype() const override { return inner_->param_dtype(); }
  DType state_dtype() const override { return inner_->state_dtype(); }
  int64_t state_bytes() const override { return inner_->state_bytes(); }  // this rank's part's
  // A collective (every rank calls it at the same point): rank 0 receives the whole arena's state
  // (gathered from every rank into new buffers, MemCategory::workspace while the caller holds
  // them), as a one-process optimizer would have it, so checkpoints keep today's format; the
  // other ranks get their part's.
  OptimizerState state() const override;
  // Takes whole-arena buffers (a checkpoint of any number of ranks) and keeps this rank's part.
  void restore(const OptimizerState& s) override { inner_->restore(s); }
  FlatRange shard() const override { return inner_->shard(); }
  const ZeroPartition& partition() const { return part_; }

 private:
  Communicator& world_;
  ZeroPartition part_;
  int64_t flat_numel_ = 0;
  std::vector<FlatSpan> whole_;  // one per parameter (the int8 state's per-rank lengths)
  StatePrecision state_ = StatePrecision::fp32;
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace mixtrain
