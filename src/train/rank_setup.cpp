// The data-parallel half of a run's wiring (train/rank_setup.h).
#include "train/rank_setup.h"

#include "mixtrain/optim/zero.h"
#include "mixtrain/train/data_parallel.h"
#include "train/checkpointing.h"
#include "train/param_shards.h"

namespace mixtrain {

RankSetup setup_ranks(RunOptions& opt) {
  RankSetup r;
  r.world = opt.world != nullptr && opt.world->size() > 1 ? opt.world : nullptr;
  r.rank0_checkpoint = opt.checkpoint;
  r.zero = opt.data_parallel.zero_stage >= 1 && r.world != nullptr;
  r.zero_stage = r.zero ? opt.data_parallel.zero_stage : 0;
  if (r.world != nullptr && r.world->rank() != 0) {
    opt.log_jsonl.clear();
    opt.numerics.path.clear();
    opt.tensorboard_dir.clear();
    opt.checkpoint.dir.clear();
    opt.checkpoint.save_every = opt.checkpoint.keep = 0;
    opt.quiet = true;
  }
  return r;
}

std::unique_ptr<GradientPartScope> gradient_part_scope(const RankSetup& ranks) {
  if (ranks.zero_stage < 2) return nullptr;
  const int n = ranks.ranks(), rank = ranks.world->rank();
  return std::make_unique<GradientPartScope>(
      [n, rank](int64_t flat_numel) {
        const FlatRange mine = zero_partition(flat_numel, n, rank).mine();
        return std::pair<int64_t, int64_t>{mine.begin, mine.end};
      },
      ranks.zero_stage == 3);  // ZeRO-3: the parameters too (train/param_shards.h)
}

std::unique_ptr<Optimizer> make_run_optimizer(const RankSetup& ranks, const ParameterStore& store,
                                              const RunOptions& opt) {
  if (!ranks.zero) return make_optimizer(store, opt.optimizer_config());
  if (!opt.numerics.path.empty())
    throw ArgumentError({"zero", "numerics"},
                        "numerics probes read every parameter's gradient, and under zero " +
                            std::to_string(ranks.zero_stage) +
                            " a rank holds the summed gradients of its own part only (probe with zero 0)");
  return std::make_unique<ZeroOptimizer>(store, opt.optimizer_config(), *ranks.world);
}

RunOptions as_one_process(const RunOptions& opt, const RankSetup& ranks) {
  RunOptions o = opt;
  o.grad_accum = opt.grad_accum * ranks.ranks();
  return o;
}

void add_data_parallel_hooks(TrainingRun& run, const RankSetup& ranks, const RunOptions& opt,
                             bool whole_at_end) {
  if (ranks.world == nullptr) return;
  if (ranks.zero && ranks.world->rank() != 0)
    run.add_hook(std::make_unique<ZeroCheckpointGatherHook>(ranks.rank0_checkpoint));
  run.add_hook(std::make_unique<DataParallelHook>(
      *ranks.world, opt.data_parallel, [c = ranks.rank0_checkpoint](TrainingRun& r, int64_t step) {
        return checkpoint_due(c, step, r.config().steps, r.summary().interrupted);
      }));
  // After the broadcast of rank 0's weights: ZeRO-3 then gives back what lies outside the part.
  if (ranks.zero_stage == 3)
    run.add_hook(std::make_unique<ParameterShardsHook>(*ranks.world, ranks.rank0_checkpoint, whole_at_end,
                                                       opt.data_parallel.allgather_dtype));
}

}  // namespace mixtrain
