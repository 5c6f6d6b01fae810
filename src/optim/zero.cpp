// ZeRO stage 1: the partition of the arena and the sharded optimizer (optim/zero.h).
#include "mixtrain/optim/zero.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "kernels/gradient_kernels.h"  // kGradNormBlock
#include "mixtrain/core/error.h"
#include "mixtrain/numeric/convert.h"
#include "optim/flat_spans.h"
#include "optim/optim_util.h"
#include "optim/working_copy.h"
#include "tensor/alloc_site.h"

namespace mixtrain {

int64_t ZeroPartition::blocks(int r) const {
  const int64_t n = shards[static_cast<size_t>(r)].size();
  return (n + kGradNormBlock - 1) / kGradNormBlock;
}

int64_t ZeroPartition::first_block(int r) const {
  int64_t b = 0;
  for (int k = 0; k < r; ++k) b += blocks(k);
  return b;
}

ZeroPartition zero_partition(int64_t flat_numel, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw ArgumentError("zero_partition: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                        " ranks (need 0 <= rank < ranks)");
  if (flat_numel < 0)
    throw ArgumentError("zero_partition: negative arena size " + std::to_string(flat_numel));
  const int64_t unit = kGradNormBlock * ranks;
  const int64_t per = (flat_numel + unit - 1) / unit * kGradNormBlock;  // S, a multiple of the block
  ZeroPartition p;
  p.rank = rank;
  for (int r = 0; r < ranks; ++r)
    p.shards.push_back({std::min(per * r, flat_numel), std::min(per * (r + 1), flat_numel)});
  return p;
}

ZeroOptimizer::ZeroOptimizer(const ParameterStore& store, const OptimizerConfig& config, Communicator& world)
    : world_(world) {
  if (!store.finalized()) throw ArgumentError("ZeroOptimizer: the parameter store is not finalized");
  flat_numel_ = store.flat_numel();
  part_ = zero_partition(flat_numel_, world.size(), world.rank());
  whole_ = flat_spans(store);
  state_ = config.state;
  inner_ = make_optimizer(store, config, part_.mine());
}

void ZeroOptimizer::step(ParameterStore& store, float lr, Tensor* working) {
  inner_->step(store, lr, working);
  Tensor p = store.flat_params();
  if (store.parameters_sharded()) {  // ZeRO-3: each rank keeps its part; forward gathers the rest
    p.storage()->bump_version();
    return;
  }
  if (p.is_meta() || part_.ranks() == 1) return;
  // Every rank's updated part to every rank, in the arena's own dtype.
  const size_t elem = dtype_size(p.dtype());
  std::vector<int64_t> bytes;
  for (const FlatRange& s : part_.shards) bytes.push_back(s.size() * static_cast<int64_t>(elem));
  world_.all_gather(p.raw_data(), bytes);
  // The working copy of the other parts: rounded to nearest from the gathered masters, as the
  // optimizer's pass rounds this rank's part (optim/working_copy.h).
  // The copy may hold only the arena's end (its elements from w.begin on).
  if (const WorkingCopyOut w = working_copy_out(working, p.numel(), "ZeroOptimizer::step")) {
    for (int r = 0; r < part_.ranks(); ++r) {
      const FlatRange& s = part_.shards[static_cast<size_t>(r)];
      if (r != part_.rank) write_working_copy(p.data<float>(), w, s.begin, s.size());
    }
  }
  p.storage()->bump_version();  // cached casts of the old weights are stale now
}

OptimizerState ZeroOptimizer::state() const {
  OptimizerState mine = inner_->state();
  if (part_.ranks() == 1) return mine;
  const bool root = world_.rank() == 0;
  OptimizerState all = mine;
  const ScopedOp site("ZeRO gathered optimizer state");  // names the checkpoint's copy in memory reports
  for (auto [from, to] :
       {std::pair{&mine.exp_avg, &all.exp_avg}, std::pair{&mine.exp_avg_sq, &all.exp_avg_sq},
        std::pair{&mine.momentum_buffer, &all.momentum_buffer},
        std::pair{&mine.compensation, &all.compensation}, std::pair{&mine.master, &all.master}}) {
    if (!from->defined()) continue;  // the same buffers are defined on every rank
    const int64_t elem = static_cast<int64_t>(dtype_size(from->dtype()));
    std::vector<int64_t> bytes;
    for (const FlatRange& s : part_.shards) bytes.push_back(s.size() * elem);
    if (root) *to = Tensor::empty({flat_numel_}, from->dtype(), MemCategory::workspace);
    if (from->is_meta()) continue;
    world_.gather(from->raw_data(), root ? to->raw_data() : nullptr, bytes, 0);
  }
  // int8 state: each rank's block absmax and fp32 fallback, of lengths its shard's spans give.
  if (state_ == StatePrecision::int8) {
    std::vector<int64_t> blocks, fallback;
    for (const FlatRange& r : part_.shards) {
      const std::vector<StateSpan> sp = state_spans(whole_, r.begin, r.end, StatePrecision::int8);
      blocks.push_back(state_blocks(sp) * 4);
      fallback.push_back(fallback_numel(sp) * 4);
    }
    for (auto [from, to] :
         {std::pair{&mine.exp_avg_q, &all.exp_avg_q}, std::pair{&mine.exp_avg_sq_q, &all.exp_avg_sq_q},
          std::pair{&mine.momentum_q, &all.momentum_q}}) {
      for (auto [f, t, bytes] : {std::tuple{&from->absmax, &to->absmax, &blocks},
                                 std::tuple{&from->fallback, &to->fallback, &fallback}}) {
        if (!f->defined()) continue;
        int64_t total = 0;
        for (int64_t b : *bytes) total += b / 4;
        if (root) *t = Tensor::empty({total}, DType::f32, MemCategory::workspace);
        if (f->is_meta()) continue;
        world_.gather(f->numel() ? f->raw_data() : nullptr, root && total ? t->raw_data() : nullptr, *bytes,
                      0);
      }
    }
  }
  return root ? all : mine;
}

}  // namespace mixtrain
