// ZeRO stage 3 (Rajbhandari et al. 2020, the P_os+g+p stage; DeepSpeed's `stage: 3`, PyTorch
// FSDP's FULL_SHARD): the parameters are split over the ranks too. The store's parameter buffer
// (and, in the *-mixed modes, the 16-bit working copy of it) holds this rank's ZeRO part only
// (nn/parameters.h GradientPartScope with parameters_too; reserved address space elsewhere, no
// memory). The model's forward gathers a unit's parameters (a transformer block's, or the
// embeddings and the rest) before it reads them and releases them after (nn/gather.h); backward
// gathers a block again before going back through it. A gather is an all-gather in place, in the
// buffer's own dtype, each rank sending its part of the unit: the same bits every rank's optimizer
// wrote, so a run is ZeRO-1's and ZeRO-2's bit for bit. In the *-mixed modes the GEMMs read the
// 16-bit working copy, so a unit's fp32 masters are gathered only where an op reads them as they
// are (layer norms, embeddings, what --keep-fp32 keeps): the ops tell (autograd/leaf_reads.h),
// a master read for the first time is gathered then (every rank reaches the same op), and from
// then on with its unit. 2 bytes an element for a block's matrices instead of 6. Gradients are ZeRO-2's
// (train/data_parallel.h); the optimizer updates its part and gathers nothing (optim/zero.h).
//
// Compressed gathers (--allgather-dtype, ZeRO++'s quantized weights, Wang et al. 2023): each rank
// sends its part of the unit rounded to bf16 (fp32 buffers) or quantized blockwise to int8 / fp8
// (dist/compressed_pieces.h) and writes the others' parts dequantized into its buffer. A rank's own
// part stays exact: the gather is in place and the part is the parameters themselves (ZeRO++
// dequantizes every part into a separate full buffer; here every rank sees the other ranks'
// parts rounded, its own as it is). Forward and backward gather the same codes (the parts do not
// change within a step), so backward goes through the weights forward used. The checkpoint's
// gathers and the final one are exact.
//
// What a rank holds: its part of every buffer, plus the units gathered at the time (the rest
// unit for a whole forward and backward, one block at a time besides), plus for checkpoints the
// whole weights while one is written (every rank gathers them; only rank 0 writes).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/leaf_reads.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

class ParameterShards final : public ParameterGather {
 public:
  // shards: every rank's part of the arena (the ZeRO partition's), in rank order. wire: how the
  // model's gathers travel (DataParallelConfig::allgather_dtype; f32: each buffer as it is).
  ParameterShards(Communicator& world, ParameterStore& store, const MixedPrecision& mp,
                  std::vector<FlatRange> shards, DType wire = DType::f32);
  bool is_gathered(const FlatRanges& unit) const override;
  void gather(const FlatRanges& unit) override { gather(unit, wire_, false); }
  void release(const FlatRanges& unit) override;
  void gather_all();  // exact, whatever the wire (a checkpoint's, the run's end)
  void release_all();
  // Gives back the pages outside this rank's part that were written before sharding began (the
  // initial weights, a restored checkpoint, rank 0's broadcast).
  void discard_outside_part();
  // After the run: a gather is refused (Error) instead of reading parameters no rank gathered.
  void end() { ended_ = true; }
  double bytes_gathered() const { return bytes_; }  // this rank's received bytes so far
  // An op is about to read `value` as it is (autograd/leaf_reads.h): beside a working copy, a
  // master not gathered yet is gathered now, held with its unit, and gathered with the unit from
  // then on. An Error when no gathered unit holds it.
  void on_leaf_read(const Tensor& value);

 private:
  struct Arena {
    Tensor t;           // the flat buffer
    int64_t first = 0;  // the arena element its element 0 holds
  };
  struct Held {
    FlatRanges unit;
    std::vector<std::pair<Storage*, std::pair<size_t, size_t>>> committed;  // (storage, (offset, bytes))
    std::vector<std::pair<int64_t, int64_t>> masters;  // the fp32 masters' ranges gathered with it
    DType wire = DType::f32;
  };
  std::vector<Arena> arenas() const;
  // masters_too: every fp32 master of the unit, not only those ops read (a checkpoint's gathers).
  void gather(const FlatRanges& unit, DType wire, bool masters_too);
  // Rank r's piece of the arena's elements [b, e) (empty where its part holds none): the parts
  // are in rank order.
  std::vector<FlatRange> pieces_of(int64_t b, int64_t e) const;
  // The arena's elements [b, e), held with h: their pages committed, every rank's piece gathered.
  void gather_range(const Arena& a, int64_t b, int64_t e, DType wire, Held& h);
  // Gathers the arena's elements [b, e) with every other rank's piece sent compressed.
  void gather_compressed(const Arena& a, int64_t b, int64_t e, DType wire);
  Communicator& world_;
  ParameterStore& store_;
  const MixedPrecision& mp_;
  std::vector<FlatRange> shards_;
  DType wire_ = DType::f32;
  // Beside a working copy: the arena elements whose fp32 masters some op reads, one range per
  // parameter (sorted).
  std::vector<std::pair<int64_t, int64_t>> read_;
  std::vector<Held> held_;
  bool ended_ = false;
  double bytes_ = 0;
};

// The run's side of ZeRO-3: installs the shards on the model's store at the start (after the
// checkpoint's restore and data parallelism's broadcast of rank 0's weights), releases every unit
// once a micro-batch's backward is done, gathers the whole weights for a checkpoint (at the steps
// rank 0 saves, by rank0_checkpoint) and releases them after it.
class ParameterShardsHook final : public TrainingHook {
 public:
  // whole_at_end: gathers the whole weights when the run ends and keeps them (for what reads them
  // after the run, Recipe::finish); otherwise they stay sharded and a gather after the run fails.
  // wire: the model's gathers' dtype (DataParallelConfig::allgather_dtype).
  ParameterShardsHook(Communicator& world, CheckpointOptions rank0_checkpoint, bool whole_at_end,
                      DType wire = DType::f32);
  ~ParameterShardsHook() override;
  void on_run_start(TrainingRun& run) override;
  void micro_batch_done(TrainingRun& run, int64_t step) override;
  void reduce_gradients(TrainingRun& run, int64_t step) override;
  void on_step_end(TrainingRun& run, const StepRecord& r) override;
  bool should_stop(TrainingRun& run, const StepRecord& r) override;
  void on_run_end(TrainingRun& run, TrainSummary& summary) override;

 private:
  Communicator& world_;
  CheckpointOptions checkpoint_;
  bool whole_at_end_ = false;
  DType wire_ = DType::f32;
  ParameterStore* store_ = nullptr;
  std::unique_ptr<ParameterShards> shards_;
  std::unique_ptr<autograd::LeafReadScope> reads_;  // the ops' reads of masters, to shards_
  int64_t steps_ = 0;                               // steps run (reduce_gradients calls)
};

}  // namespace mixtrain
