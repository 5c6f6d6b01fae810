// ZeRO stage 3's parameter shards and their hook (train/param_shards.h).
#include "train/param_shards.h"

#include <algorithm>
#include <string>

#include "autograd/leaf_reads.h"
#include "dist/compressed_pieces.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/optim/zero.h"
#include "mixtrain/tensor/storage.h"
#include "tensor/alloc_site.h"
#include "train/checkpointing.h"

namespace mixtrain {

// Element x of the flat arena in a buffer whose element 0 is the arena's element `first`, as a T*.
template <class T>
T* arena_at(const Tensor& buffer, int64_t first, int64_t x) {
  return buffer.data<T>() + (x - first);
}

ParameterShards::ParameterShards(Communicator& world, ParameterStore& store, const MixedPrecision& mp,
                                 std::vector<FlatRange> shards, DType wire)
    : world_(world), store_(store), mp_(mp), shards_(std::move(shards)), wire_(wire) {
  if (static_cast<int>(shards_.size()) != world_.size())
    throw ArgumentError("ParameterShards: " + std::to_string(shards_.size()) + " parts for " +
                        std::to_string(world_.size()) + " ranks");
  const auto [b, e] = store_.parameter_part();
  const FlatRange& mine = shards_[static_cast<size_t>(world_.rank())];
  if (b != mine.begin || e != mine.end)
    throw ArgumentError("ParameterShards: the store holds [" + std::to_string(b) + ", " + std::to_string(e) +
                        "), this rank's part is [" + std::to_string(mine.begin) + ", " +
                        std::to_string(mine.end) + ")");
}

std::vector<ParameterShards::Arena> ParameterShards::arenas() const {
  std::vector<Arena> a{{store_.flat_params(), 0}};
  // The *-mixed modes' 16-bit working copy (from the first step on): the GEMMs read it.
  if (const Tensor& w = mp_.working_copy(); w.defined()) a.push_back({w, store_.flat_numel() - w.numel()});
  return a;
}

bool ParameterShards::is_gathered(const FlatRanges& unit) const {
  return std::any_of(held_.begin(), held_.end(), [&](const Held& h) { return h.unit == unit; });
}

void ParameterShards::gather(const FlatRanges& unit, DType wire, bool masters_too) {
  if (ended_)
    throw Error({"zero"},
                "zero 3: the run has ended and its parameters stay sharded over the ranks; nothing may "
                "read them now");
  if (is_gathered(unit)) return;
  Held h{unit, {}, {}, wire};
  const std::vector<Arena> all = arenas();
  for (size_t i = 0; i < all.size(); ++i) {
    const Arena& a = all[i];
    // Beside a working copy, the masters of the elements ops read (read_) only.
    const bool read_only = i == 0 && all.size() == 2 && !masters_too;
    for (auto [b, e] : unit) {
      b = std::max(b, a.first);
      if (b >= e) continue;
      if (!read_only) {
        gather_range(a, b, e, wire, h);
        continue;
      }
      for (const auto& [x, y] : read_)
        if (std::max(x, b) < std::min(y, e)) gather_range(a, std::max(x, b), std::min(y, e), wire, h);
    }
  }
  held_.push_back(std::move(h));
}

std::vector<FlatRange> ParameterShards::pieces_of(int64_t b, int64_t e) const {
  std::vector<FlatRange> pieces;
  for (const FlatRange& s : shards_) {
    const int64_t begin = std::max(b, s.begin);
    pieces.push_back({begin, std::max(begin, std::min(e, s.end))});
  }
  return pieces;
}

void ParameterShards::gather_range(const Arena& a, int64_t b, int64_t e, DType wire, Held& h) {
  const int64_t elem = static_cast<int64_t>(dtype_size(a.t.dtype()));
  Storage* st = a.t.storage().get();
  const auto [pb, pe] = store_.parameter_part();
  // Memory for what lies outside this rank's part, charged while held.
  const auto commit = [&](int64_t x, int64_t y) {
    if (x >= y) return;
    const auto off = static_cast<size_t>((a.t.offset() + x - a.first) * elem);
    const auto bytes = static_cast<size_t>((y - x) * elem);
    st->commit(off, bytes);
    h.committed.push_back({st, {off, bytes}});
  };
  commit(b, std::min(e, pb));
  commit(std::max(b, pe), e);
  if (a.first == 0 && st == store_.flat_params().storage().get()) h.masters.push_back({b, e});
  // Compressed: int8 and fp8 every buffer, bf16 the fp32 ones (16-bit ones travel as they are).
  if (wire == DType::i8 || wire == DType::f8_e4m3 || (wire == DType::bf16 && a.t.dtype() == DType::f32))
    return gather_compressed(a, b, e, wire);
  std::vector<int64_t> bytes;
  for (const FlatRange& p : pieces_of(b, e)) bytes.push_back(p.size() * elem);
  bytes_ += static_cast<double>((e - b) * elem - bytes[static_cast<size_t>(world_.rank())]);
  if (!a.t.is_meta()) world_.all_gather(static_cast<char*>(a.t.raw_data()) + (b - a.first) * elem, bytes);
}

void ParameterShards::on_leaf_read(const Tensor& value) {
  // Asked for every op's leaf inputs: the cheap checks first. No working copy: the unit gathers
  // hold every master.
  const Tensor& m = store_.flat_params();
  if (ended_ || !mp_.working_copy().defined() || value.storage() != m.storage()) return;
  const int64_t x = value.offset() - m.offset(), y = x + value.numel();
  if (x < 0 || y > m.numel() || x >= y) return;
  // What of [x, y) no held unit has gathered (the same on every rank: the units and read_ are).
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (const Held& h : held_) covered.insert(covered.end(), h.masters.begin(), h.masters.end());
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<int64_t, int64_t>> missing;
  int64_t at = x;
  for (const auto& [b, e] : covered) {
    if (e <= at || b >= y) continue;
    if (b > at) missing.push_back({at, b});
    at = std::max(at, e);
  }
  if (at < y) missing.push_back({at, y});
  if (missing.empty()) return;
  // Learned for the next gathers of its unit, and gathered now, held with the unit holding it.
  // One entry per parameter read, not merged: a compressed gather's blocks start at each range's
  // start, so the learned gathers send the same pieces as this first one (a resumed run, which
  // learns afresh, gathers the same values).
  read_.insert(std::upper_bound(read_.begin(), read_.end(), std::pair{x, y}), {x, y});
  const auto holds = [&](const Held& h) {
    return std::any_of(h.unit.begin(), h.unit.end(),
                       [&](const auto& r) { return r.first <= x && y <= r.second; });
  };
  const auto it = std::find_if(held_.rbegin(), held_.rend(), holds);
  if (it == held_.rend())
    throw Error({"zero"}, "zero 3: an op reads parameter elements [" + std::to_string(x) + ", " +
                              std::to_string(y) +
                              ") in fp32 outside every gathered unit (a model reading a parameter it did "
                              "not gather, nn/gather.h)");
  for (const auto& [b, e] : missing) gather_range({m, 0}, b, e, it->wire, *it);
}

void ParameterShards::gather_compressed(const Arena& a, int64_t b, int64_t e, DType wire) {
  // Every rank's piece of [b, e) and its bytes on the wire.
  const std::vector<FlatRange> pieces = pieces_of(b, e);
  std::vector<int64_t> bytes, at;
  int64_t total = 0;
  for (const FlatRange& p : pieces) {
    bytes.push_back(wire == DType::bf16 ? 2 * p.size() : dist::piece_bytes(p.size()));
    at.push_back(total);
    total += bytes.back();
  }
  const size_t self = static_cast<size_t>(world_.rank());
  bytes_ += static_cast<double>(total - bytes[self]);
  if (total == 0) return;
  const ScopedOp site("ZeRO-3 compressed parameter pieces");  // names them in memory reports
  Tensor buffer = Tensor::empty({total}, DType::i8, MemCategory::workspace);
  if (a.t.is_meta()) return;  // the meta device: the buffer is the prediction's, nothing moves
  char* base = static_cast<char*>(buffer.raw_data());
  const DType dt = a.t.dtype();
  const dist::PieceCode code = wire == DType::i8 ? dist::PieceCode::int8 : dist::PieceCode::fp8_e4m3;
  const FlatRange& mine = pieces[self];
  char* out = base + at[self];
  if (mine.size() > 0) {
    if (wire == DType::bf16)
      convert_f32_to_bf16(arena_at<float>(a.t, a.first, mine.begin), reinterpret_cast<bf16*>(out),
                          static_cast<size_t>(mine.size()));
    else if (dt == DType::f32)
      dist::quantize_piece(code, arena_at<float>(a.t, a.first, mine.begin), nullptr, mine.size(), 1.f, out);
    else if (dt == DType::bf16)
      dist::quantize_piece(code, arena_at<bf16>(a.t, a.first, mine.begin), mine.size(), out);
    else
      dist::quantize_piece(code, arena_at<fp16>(a.t, a.first, mine.begin), mine.size(), out);
  }
  world_.all_gather(base, bytes);
  for (size_t r = 0; r < pieces.size(); ++r) {
    const FlatRange& p = pieces[r];
    const int64_t n = p.size();
    if (r == self || n == 0) continue;
    const char* in = base + at[r];
    if (wire == DType::bf16) {
      convert_bf16_to_f32(reinterpret_cast<const bf16*>(in), arena_at<float>(a.t, a.first, p.begin),
                          static_cast<size_t>(n));
    } else if (dt == DType::f32) {
      dist::dequantize_piece(code, in, n, 0, n, arena_at<float>(a.t, a.first, p.begin));
    } else {  // into the 16-bit buffer, rounded to nearest even, a block at a time
      float values[dist::kPieceBlock];
      for (int64_t c = 0; c < n; c += dist::kPieceBlock) {
        const int64_t m = std::min(dist::kPieceBlock, n - c);
        dist::dequantize_piece(code, in, n, c, c + m, values);
        if (dt == DType::bf16)
          convert_f32_to_bf16(values, arena_at<bf16>(a.t, a.first, p.begin + c), static_cast<size_t>(m));
        else
          convert_f32_to_fp16(values, arena_at<fp16>(a.t, a.first, p.begin + c), static_cast<size_t>(m));
      }
    }
  }
}

void ParameterShards::release(const FlatRanges& unit) {
  const auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.unit == unit; });
  if (it == held_.end()) return;
  for (const auto& [st, range] : it->committed) st->decommit(range.first, range.second);
  held_.erase(it);
}

void ParameterShards::gather_all() { gather({{0, store_.flat_numel()}}, DType::f32, true); }

void ParameterShards::release_all() {
  while (!held_.empty()) release(FlatRanges(held_.back().unit));
}

void ParameterShards::discard_outside_part() {
  const auto [pb, pe] = store_.parameter_part();
  for (const Arena& a : arenas()) {
    const int64_t elem = static_cast<int64_t>(dtype_size(a.t.dtype()));
    const int64_t n = a.t.numel();
    const auto drop = [&](int64_t x, int64_t y) {  // arena elements [x, y)
      x = std::clamp<int64_t>(x - a.first, 0, n), y = std::clamp<int64_t>(y - a.first, 0, n);
      if (x < y)
        a.t.storage()->discard(static_cast<size_t>((a.t.offset() + x) * elem),
                               static_cast<size_t>((y - x) * elem));
    };
    drop(0, pb);
    drop(pe, store_.flat_numel());
  }
}

ParameterShardsHook::ParameterShardsHook(Communicator& world, CheckpointOptions rank0_checkpoint,
                                         bool whole_at_end, DType wire)
    : world_(world), checkpoint_(std::move(rank0_checkpoint)), whole_at_end_(whole_at_end), wire_(wire) {}

ParameterShardsHook::~ParameterShardsHook() {
  if (store_ != nullptr && store_->gather() == shards_.get()) store_->set_gather(nullptr);
}

void ParameterShardsHook::on_run_start(TrainingRun& run) {
  if (!run.model().gathers_sharded_parameters())
    throw ArgumentError({"zero"},
                        "zero 3: the " + std::string(run.model().family()) +
                            " model does not gather its parameters block by block yet (use zero 2)");
  store_ = &run.model().params();
  if (!store_->parameters_sharded() && world_.size() > 1)
    throw ArgumentError({"zero"},
                        "zero 3 needs the model's parameters to hold this rank's part only (built inside a "
                        "GradientPartScope with parameters_too, nn/parameters.h)");
  const auto* zero = dynamic_cast<const ZeroOptimizer*>(&run.optimizer());
  if (zero == nullptr || zero->partition().ranks() != world_.size())
    throw ArgumentError({"zero"}, "zero 3 needs the run's optimizer to be a ZeroOptimizer over this world");
  shards_ = std::make_unique<ParameterShards>(world_, *store_, run.mp(), zero->partition().shards, wire_);
  shards_->discard_outside_part();
  run.mp().prepare_working_copy(*store_);  // *-mixed: its part, gathered with the masters from step 1 on
  store_->set_gather(shards_.get());
  reads_ = std::make_unique<autograd::LeafReadScope>(
      [s = shards_.get()](const Tensor& value) { s->on_leaf_read(value); });
}

void ParameterShardsHook::micro_batch_done(TrainingRun&, int64_t) { shards_->release_all(); }
void ParameterShardsHook::reduce_gradients(TrainingRun&, int64_t) {
  shards_->release_all();
  ++steps_;
}

void ParameterShardsHook::on_step_end(TrainingRun& run, const StepRecord& r) {
  // Rank 0's checkpoint (its CheckpointHook::should_stop, next) reads the whole weights.
  if (!checkpoint_due(checkpoint_, r.step, run.config().steps, run.summary().interrupted)) return;
  shards_->release_all();
  shards_->gather_all();
}

bool ParameterShardsHook::should_stop(TrainingRun&, const StepRecord&) {
  shards_->release_all();
  return false;
}

void ParameterShardsHook::on_run_end(TrainingRun&, TrainSummary& s) {
  reads_.reset();
  shards_->release_all();
  s.gather_bytes_per_step = steps_ > 0 ? shards_->bytes_gathered() / static_cast<double>(steps_) : 0;
  if (whole_at_end_) {  // kept whole (the storage holds the charge): nothing gathers any more
    shards_->gather_all();
    store_->set_gather(nullptr);
    return;
  }
  shards_->end();
}

}  // namespace mixtrain
