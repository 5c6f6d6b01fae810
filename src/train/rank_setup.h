// The data-parallel half of a run's wiring, shared by train() and finetune() so both behave alike
// under mpirun (train/data_parallel.h, optim/zero.h): which rank writes, the optimizer (ZeRO's
// part or the whole), the hooks that sum gradients and join ZeRO's checkpoint gathers, and the
// options a checkpoint records (as one process would run them).
//
//   RankSetup ranks = setup_ranks(opt);           // first: the other ranks' outputs are cleared
//   auto optimizer = make_run_optimizer(ranks, model.params(), opt);
//   rc.world = ranks.world;
//   TrainingRun run(model, *optimizer, mp, data, rc);
//   run.add_hook(checkpointing built from as_one_process(opt, ranks));
//   add_data_parallel_hooks(run, ranks, opt);     // after the checkpoint hook, before the observers
#pragma once
#include <memory>

#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

struct RankSetup {
  Communicator* world = nullptr;       // the ranks when more than one, else null (one process)
  CheckpointOptions rank0_checkpoint;  // what rank 0 saves by: the others join its ZeRO gathers
  bool zero = false;                   // ZeRO stage 1, 2 or 3 over several ranks
  int zero_stage = 0;                  // that stage when zero, else 0
  int ranks() const { return world ? world->size() : 1; }
};

// Reads opt.world. On ranks other than 0 clears every output of opt (step log, numerics,
// TensorBoard, checkpoints; quiet): rank 0 alone writes what a run writes.
RankSetup setup_ranks(RunOptions& opt);
// ZeRO-2 and 3: while alive, models built keep only this rank's part of their gradient buffer (the
// ZeRO partition's, nn/parameters.h GradientPartScope), under ZeRO-3 of their parameters too; null
// otherwise. Around make_model.
std::unique_ptr<GradientPartScope> gradient_part_scope(const RankSetup& ranks);
// ZeRO's part of the optimizer on this rank (zero 1, 2 or 3 over several ranks), else the whole one.
// ArgumentError for numerics probes under ZeRO (a rank holds its part's summed gradients only).
std::unique_ptr<Optimizer> make_run_optimizer(const RankSetup& ranks, const ParameterStore& store,
                                              const RunOptions& opt);
// A checkpoint records the run as one process would make it: grad_accum over all ranks, so a run
// saved with N ranks resumes with any N' (grad_accum * N' equal) or in one process.
RunOptions as_one_process(const RunOptions& opt, const RankSetup& ranks);
// After the checkpoint hook (which restores first): under ZeRO the other ranks' half of rank 0's
// optimizer-state gathers (at the same steps), then data parallelism, which sends rank 0's weights
// and sums gradients before any other hook sees them (a fault injected after the sum on one rank
// tests the ranks' agreement). Nothing for one process.
// whole_at_end: under ZeRO-3 every rank gathers the whole weights when the run ends (rank 0 reads
// them after it, Recipe::finish_reads_weights).
void add_data_parallel_hooks(TrainingRun& run, const RankSetup& ranks, const RunOptions& opt,
                             bool whole_at_end = false);

}  // namespace mixtrain
