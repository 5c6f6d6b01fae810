// Data parallelism as a TrainingHook (train/data_parallel.h).
#include "mixtrain/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include "core/crc.h"
#include "dist/compressed_pieces.h"
#include "kernels/ops_backward.h"  // add_inplace
#include "mixtrain/numeric/convert.h"
#include "mixtrain/optim/zero.h"
#include "mixtrain/tensor/memory.h"
#include "tensor/alloc_site.h"

namespace mixtrain {
namespace {
// The code of the compressed sums' pieces (dist/compressed_pieces.h).
dist::PieceCode piece_code(DType reduce_dtype) {
  return reduce_dtype == DType::i8 ? dist::PieceCode::int8 : dist::PieceCode::fp8_e4m3;
}
// The dtypes data travels in between ranks (reduce_dtype, allgather_dtype).
bool is_wire_dtype(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::i8 || t == DType::f8_e4m3;
}
// A travelling dtype as the flags spell it.
std::string wire_name(DType t) {
  return t == DType::i8 ? "int8" : t == DType::f8_e4m3 ? "fp8" : t == DType::bf16 ? "bf16" : "fp32";
}
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void DataParallelConfig::validate(DType grad_dtype) const {
  if (!is_wire_dtype(reduce_dtype))
    throw ArgumentError({"grad_reduce_dtype"}, "grad_reduce_dtype must be fp32, bf16, int8 or fp8, got " +
                                                   std::string(dtype_name(reduce_dtype)));
  const bool compressed = this->compressed();
  const std::string name = wire_name(reduce_dtype);
  if (compressed && zero_stage == 0)
    throw ArgumentError(
        {"grad_reduce_dtype", "zero"},
        "grad_reduce_dtype " + name + " compresses ZeRO's reduce-scatter: it needs zero 1, 2 or 3");
  if (compressed && grad_dtype != DType::f32)
    throw ArgumentError({"grad_reduce_dtype"},
                        "grad_reduce_dtype " + name +
                            " needs fp32 gradients (32-true or a *-mixed precision); this "
                            "precision keeps " +
                            std::string(dtype_name(grad_dtype)) + " (use fp32 or bf16)");
  if (reduce_dtype == DType::bf16 && grad_dtype != DType::f32 && grad_dtype != DType::bf16)
    throw ArgumentError({"grad_reduce_dtype"},
                        "grad_reduce_dtype bf16 needs fp32 or bf16 gradients; this precision keeps " +
                            std::string(dtype_name(grad_dtype)) + " (use fp32)");
  if (!is_wire_dtype(allgather_dtype))
    throw ArgumentError({"allgather_dtype"}, "allgather_dtype must be fp32, bf16, int8 or fp8, got " +
                                                 std::string(dtype_name(allgather_dtype)));
  if (gathers_compressed() && zero_stage != 3)
    throw ArgumentError({"allgather_dtype", "zero"},
                        "allgather_dtype " + wire_name(allgather_dtype) +
                            " compresses ZeRO-3's parameter gathers: it needs zero 3");
  if (bucket_bytes <= 0)
    throw ArgumentError({"bucket_bytes"},
                        "bucket_bytes must be positive, got " + std::to_string(bucket_bytes));
  if (zero_stage < 0 || zero_stage > 3)
    throw ArgumentError({"zero"},
                        "zero must be 0, 1 (ZeRO stage 1: optimizer state sharded), 2 (gradients too) or 3 "
                        "(parameters too), got " +
                            std::to_string(zero_stage));
}

DataParallelHook::DataParallelHook(Communicator& world, DataParallelConfig config, SaveDue rank0_saves)
    : world_(world), config_(config), rank0_saves_(std::move(rank0_saves)) {}

DataParallelHook::~DataParallelHook() = default;

void DataParallelHook::build_buckets(const ParameterStore& store) {
  const auto& infos = store.infos();
  const bool staged = config_.reduce_dtype == DType::bf16 && store.flat_grads().dtype() == DType::f32;
  const int64_t elem = static_cast<int64_t>(dtype_size(bucket_dtype(store.flat_grads().dtype())));
  buckets_.clear();
  bucket_of_.assign(infos.size(), 0);
  int64_t end = store.flat_numel();
  Bucket b;
  for (size_t k = infos.size(); k-- > 0;) {  // reverse order: the order backward finishes them
    b.params.push_back(k);
    bucket_of_[k] = buckets_.size();
    b.begin = infos[k].offset;
    if ((end - b.begin) * elem >= config_.bucket_bytes || k == 0) {
      if (k == 0) b.begin = 0;
      b.end = end;
      end = b.begin;
      buckets_.push_back(std::move(b));
      b = Bucket();
    }
  }
  param_at_.clear();
  for (size_t k = 0; k < infos.size(); ++k) param_at_[infos[k].offset] = k;
  if (staged && config_.zero_stage < 2) staging_.assign(static_cast<size_t>(store.flat_numel()), 0);
  bucket_grads_.assign(buckets_.size(), Tensor());
  pieces_send_.assign(buckets_.size(), Tensor());
  pieces_recv_.assign(buckets_.size(), Tensor());
  in_flight_.clear();
}

void DataParallelHook::on_run_start(TrainingRun& run) {
  run_ = &run;
  ParameterStore& store = run.model().params();
  config_.validate(store.flat_grads().dtype());
  grads_ = store.flat_grads();
  build_buckets(store);
  shards_.clear();
  if (config_.zero_stage >= 1) {
    const auto* zero = dynamic_cast<const ZeroOptimizer*>(&run.optimizer());
    if (zero == nullptr || zero->partition().ranks() != world_.size())
      throw ArgumentError({"zero"}, "zero " + std::to_string(config_.zero_stage) +
                                        " needs the run's optimizer to be a ZeroOptimizer over this world");
    shards_ = zero->partition().shards;
    const FlatRange& mine = zero->partition().mine();
    if (config_.zero_stage >= 2 && store.gradient_part() != std::pair<int64_t, int64_t>{mine.begin, mine.end})
      throw ArgumentError({"zero"},
                          "zero " + std::to_string(config_.zero_stage) +
                              " needs the model's gradient buffer to hold this rank's part only (built "
                              "inside a GradientPartScope, nn/parameters.h)");
  }
  if (config_.compressed()) {
    const ScopedOp site("compressed sums' error feedback");  // names it in memory reports
    residual_ = Tensor::zeros({store.flat_numel()}, DType::f32, MemCategory::gradients);
  }
  hand_out_error_feedback(run);
  stats_ = DataParallelStats();
  stats_.buckets_per_step = static_cast<int64_t>(buckets_.size());
  // Every rank starts from rank 0's weights (a restored checkpoint included: each rank read it).
  Tensor params = store.flat_params();
  if (!params.is_meta()) {
    world_.broadcast(params.raw_data(), static_cast<size_t>(params.numel()) * dtype_size(params.dtype()), 0);
    params.storage()->bump_version();  // cached autocast copies are stale
  }
  if (config_.zero_stage >= 2)
    handoff_ = std::make_unique<autograd::GradHandoffScope>(autograd::GradHandoff{
        [this](const Tensor& buffer) { return grad_place(buffer); },
        [this](const Tensor& buffer, Tensor g) { on_grad_handoff(buffer, std::move(g)); }});
  else
    scope_ = std::make_unique<autograd::GradReadyScope>([this](const Tensor& g) { on_grad_ready(g); });
}

void DataParallelHook::hand_out_error_feedback(TrainingRun& run) {
  Tensor carried = std::exchange(run.carried_error_feedback(), Tensor());
  if (!carried.defined() || carried.is_meta()) return;
  if (!config_.compressed()) {
    if (world_.rank() == 0)
      std::fprintf(stderr,
                   "mixtrain: warning: the checkpoint carries the error feedback of compressed gradient "
                   "sums (rounding not yet sent); this run sums in %s and drops it\n",
                   wire_name(config_.reduce_dtype).c_str());
    return;
  }
  // Part q's sum to rank (q + 1) mod N: with 2 ranks each rank's own residual (a rank holds none
  // on its own part, so the other's is the sum there).
  const int n = world_.size();
  const FlatRange& p = shards_[static_cast<size_t>((world_.rank() + n - 1) % n)];
  residual_.slice(0, p.begin, p.end).copy_from(carried.slice(0, p.begin, p.end));
}

void DataParallelHook::on_step_end(TrainingRun& run, const StepRecord& r) {
  if (!config_.compressed() || residual_.is_meta() || !rank0_saves_ || !rank0_saves_(run, r.step)) return;
  // Every rank's residual, summed (in rank order) for rank 0's save (its CheckpointHook::
  // should_stop, after every hook's on_step_end); freed at the next step's start.
  const ScopedOp site("compressed sums' error feedback, summed for a checkpoint");
  Tensor sum = residual_.clone();
  world_.start_sum(sum.raw_data(), sum.numel(), DType::f32);
  world_.wait_all();
  if (world_.rank() == 0) run.carried_error_feedback() = std::move(sum);
}

void DataParallelHook::on_run_end(TrainingRun&, TrainSummary& s) {
  scope_.reset();
  handoff_.reset();
  s.ranks = world_.size();
  s.zero_stage = shards_.empty() ? 0 : config_.zero_stage;
  // Every rank's tracker peaks by category, to rank 0's summary: one sum over the ranks of rows
  // that are zero but for the rank's own (bytes are exact in a double up to 2^53).
  const MemorySnapshot mem = MemoryTracker::current().snapshot();
  std::vector<double> rows(static_cast<size_t>(world_.size()) * kNumMemCategories, 0.0);
  for (size_t c = 0; c < kNumMemCategories; ++c)
    rows[static_cast<size_t>(world_.rank()) * kNumMemCategories + c] = static_cast<double>(mem.peak[c]);
  world_.sum(rows);
  s.rank_peaks.assign(static_cast<size_t>(world_.size()), {});
  for (size_t r = 0; r < s.rank_peaks.size(); ++r)
    for (size_t c = 0; c < kNumMemCategories; ++c)
      s.rank_peaks[r][c] = static_cast<int64_t>(rows[r * kNumMemCategories + c]);
  s.buckets_per_step = stats_.buckets_per_step;
  if (stats_.steps > 0) {
    const double n = static_cast<double>(stats_.steps);
    s.buckets_overlapped =
        static_cast<double>(stats_.started_in_backward) / (n * static_cast<double>(stats_.buckets_per_step));
    s.reduce_wait_s = stats_.wait_seconds / n;
    s.reduce_overlap_s = stats_.overlap_seconds / n;
    s.reduce_bytes_per_step = stats_.bytes_sent / n;
  }
}

void DataParallelHook::new_micro_batch() {
  ready_.assign(bucket_of_.size(), 0);
  pending_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int64_t>(buckets_[b].params.size());
  next_ = 0;
}

void DataParallelHook::on_step_begin(TrainingRun& run, int64_t) {
  run.carried_error_feedback() = Tensor();  // a checkpoint's copy, saved by now
  new_micro_batch();
  micro_ = 0;
  first_start_ = -1;
}

void DataParallelHook::mark_ready(size_t param) {
  if (ready_[param]) return;
  ready_[param] = 1;
  --pending_[bucket_of_[param]];
  const size_t before = next_;
  start_ready_buckets();
  stats_.started_in_backward += static_cast<int64_t>(next_ - before);
  world_.progress();
}

void DataParallelHook::on_grad_ready(const Tensor& grad) {
  // Only the last micro-batch's backward makes a gradient final.
  // (On the meta device only the compressed sums' buffers need following: a prediction of their memory.)
  if (!run_ || run_->replaying() || run_->micro_batch() != run_->config().grad_accum - 1 || idle_on_meta())
    return;
  if (const std::optional<size_t> k = param_of(grad)) mark_ready(*k);
}

std::optional<size_t> DataParallelHook::param_of(const Tensor& buffer) const {
  if (buffer.storage() != grads_.storage()) return std::nullopt;  // another store's parameter
  const auto it = param_at_.find(buffer.offset() - grads_.offset());
  if (it == param_at_.end()) return std::nullopt;
  return it->second;
}

Tensor DataParallelHook::bucket_slot(size_t k, int64_t numel) {
  const size_t b = bucket_of_[k];
  const int64_t at = run_->model().params().infos()[k].offset - buckets_[b].begin;
  return bucket_grads(b).slice(0, at, at + numel);
}

FlatRange DataParallelHook::my_piece(size_t b) const {
  const Bucket& k = buckets_[b];
  const FlatRange& mine = shards_[static_cast<size_t>(world_.rank())];
  return {std::max(k.begin, mine.begin), std::min(k.end, mine.end)};
}

Tensor& DataParallelHook::bucket_grads(size_t b) {
  // The bucket's buffer of an earlier micro-batch still in flight (the next backward reached the
  // bucket before it was done): completed first, the buckets before it too.
  const auto flying = [&] {
    return std::any_of(in_flight_.begin(), in_flight_.end(), [b](const auto& f) { return f.first == b; });
  };
  while (flying()) finish_oldest();
  if (!bucket_grads_[b].defined()) {
    const ScopedOp site("ZeRO-2 gradient bucket");  // names it in memory reports
    bucket_grads_[b] = Tensor::zeros({buckets_[b].end - buckets_[b].begin}, bucket_dtype(grads_.dtype()),
                                     MemCategory::gradients);
  }
  return bucket_grads_[b];
}

Tensor DataParallelHook::grad_place(const Tensor& buffer) {
  if (!run_ || run_->replaying()) return Tensor();
  const std::optional<size_t> k = param_of(buffer);
  if (!k) return Tensor();
  const Tensor slot = bucket_slot(*k, buffer.numel());
  if (slot.dtype() != buffer.dtype()) return Tensor();  // rounded into the bf16 bucket when final
  return slot.reshape(buffer.shape());
}

void DataParallelHook::on_grad_handoff(const Tensor& buffer, Tensor grad) {
  // A replay (this rank's alone) learns nothing: its gradients are dropped.
  if (!run_ || run_->replaying()) return;
  const std::optional<size_t> k = param_of(buffer);
  if (!k) return;
  Tensor slot = bucket_slot(*k, buffer.numel());
  if (grad.defined() && grad.storage() != slot.storage())  // a gradient of its own: into the bucket
    slot.copy_from(grad.reshape({grad.numel()}));
  grad = Tensor();  // freed before the bucket may start
  mark_ready(*k);
}

void DataParallelHook::start_ready_buckets() {
  while (next_ < buckets_.size() && pending_[next_] == 0) start(next_++);
}

std::vector<int64_t> DataParallelHook::piece_counts(int64_t begin, int64_t end) const {
  std::vector<int64_t> counts;
  for (const FlatRange& s : shards_)
    counts.push_back(std::max<int64_t>(0, std::min(end, s.end) - std::max(begin, s.begin)));
  return counts;
}

void DataParallelHook::start(size_t b) {
  if (first_start_ < 0) first_start_ = now_s();
  const Bucket& k = buckets_[b];
  const int64_t n = k.end - k.begin;
  // The payload: this rank's pieces of the other ranks' parts ((N-1)/N of the bucket for an
  // all-reduce), in the dtype they travel in.
  const std::vector<int64_t> counts = piece_counts(k.begin, k.end);
  const double elem = static_cast<double>(dtype_size(bucket_dtype(grads_.dtype())));
  if (shards_.empty())
    stats_.bytes_sent += static_cast<double>(n) / world_.size() * (world_.size() - 1) * elem;
  for (size_t r = 0; r < counts.size(); ++r)
    if (static_cast<int>(r) != world_.rank())
      stats_.bytes_sent += config_.compressed() ? static_cast<double>(dist::piece_bytes(counts[r]))
                                                : static_cast<double>(counts[r]) * elem;
  if (config_.zero_stage >= 2) {
    const Tensor& g = bucket_grads(b);  // zeros if no parameter of it had a gradient
    if (config_.compressed())
      start_compressed(b, counts, g.is_meta() ? nullptr : g.data<float>());
    else if (!g.is_meta())
      world_.start_reduce_scatter(g.raw_data(), counts, g.dtype());
    in_flight_.push_back({b, micro_});
    while (in_flight_.size() > kZero2InFlight) finish_oldest();
    return;
  }
  void* data =
      static_cast<char*>(grads_.raw_data()) + static_cast<size_t>(k.begin) * dtype_size(grads_.dtype());
  DType dtype = grads_.dtype();
  if (!staging_.empty()) {  // fp32 gradients summed in bf16
    bf16* s = reinterpret_cast<bf16*>(staging_.data() + k.begin);
    convert_f32_to_bf16(grads_.data<float>() + k.begin, s, static_cast<size_t>(n));
    data = s;
    dtype = DType::bf16;
  }
  if (shards_.empty())
    world_.start_sum(data, n, dtype);
  else if (config_.compressed())
    start_compressed(b, counts, grads_.is_meta() ? nullptr : grads_.data<float>() + k.begin);
  else  // ZeRO: each rank's part of the bucket, summed, lands on that rank only
    world_.start_reduce_scatter(data, counts, dtype);
}

void DataParallelHook::start_compressed(size_t b, std::span<const int64_t> counts, float* data) {
  const Bucket& k = buckets_[b];
  const size_t self = static_cast<size_t>(world_.rank());
  std::vector<int64_t> send(counts.size(), 0), recv(counts.size(), 0);
  int64_t send_total = 0, recv_total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (r == self) continue;  // its own piece stays in fp32
    send[r] = dist::piece_bytes(counts[r]);
    recv[r] = dist::piece_bytes(counts[self]);
    send_total += send[r];
    recv_total += recv[r];
  }
  const ScopedOp site("compressed gradient pieces");  // names them in memory reports
  pieces_send_[b] = Tensor::empty({send_total}, DType::i8, MemCategory::workspace);
  pieces_recv_[b] = Tensor::empty({recv_total}, DType::i8, MemCategory::workspace);
  if (data == nullptr) return;  // the meta device: the buffers are the prediction's, nothing moves
  const float loss_scale =
      run_->mp().scaler().enabled() ? static_cast<float>(run_->mp().scaler().scale()) : 1.f;
  char* out = static_cast<char*>(pieces_send_[b].raw_data());
  int64_t at = k.begin;  // the piece's first element in the arena
  for (size_t r = 0; r < counts.size(); ++r) {
    if (r != self)
      dist::quantize_piece(piece_code(config_.reduce_dtype), data + (at - k.begin),
                           residual_.data<float>() + at, counts[r], loss_scale, out);
    out += send[r];
    at += counts[r];
  }
  world_.start_all_to_all(pieces_send_[b].raw_data(), send, pieces_recv_[b].raw_data(), recv);
}

void DataParallelHook::finish_compressed(size_t b, float* data) {
  Tensor sent = std::move(pieces_send_[b]), got = std::move(pieces_recv_[b]);
  const Bucket& k = buckets_[b];
  const auto [begin, end] = my_piece(b);
  if (data == nullptr || begin >= end) return;
  // Rank order: (v0 + v1) + v2 ..., this rank's own values unquantized, the others dequantized.
  const int64_t n = end - begin;
  std::vector<float> sum(static_cast<size_t>(n), 0.f);
  const char* in = static_cast<const char*>(got.raw_data());
  for (int r = 0; r < world_.size(); ++r) {
    if (r == world_.rank()) {
      const float* own = data + (begin - k.begin);
      for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += own[i];
    } else {
      dist::add_dequantized_piece(piece_code(config_.reduce_dtype), in, n, sum.data());
      in += dist::piece_bytes(n);
    }
  }
  std::copy(sum.begin(), sum.end(), data + (begin - k.begin));
}

float* DataParallelHook::bucket_data(size_t b) {
  if (config_.zero_stage >= 2) return bucket_grads_[b].is_meta() ? nullptr : bucket_grads_[b].data<float>();
  return grads_.is_meta() ? nullptr : grads_.data<float>() + buckets_[b].begin;
}

void DataParallelHook::finish_oldest() {
  const auto [b, micro] = in_flight_.front();
  in_flight_.erase(in_flight_.begin());
  if (!bucket_grads_[b].is_meta()) world_.wait_oldest(1);
  if (config_.compressed()) finish_compressed(b, bucket_data(b));
  Tensor g = std::move(bucket_grads_[b]);
  const Bucket& k = buckets_[b];
  const auto [begin, end] = my_piece(b);
  if (begin >= end) return;
  // This rank's piece, summed over ranks, into its part: the first micro-batch's is copied, the
  // later ones added (in the gradients' dtype, as accumulation adds).
  Tensor part = grads_.slice(0, begin, end);
  const Tensor piece = g.slice(0, begin - k.begin, end - k.begin);
  if (micro == 0)
    part.copy_from(piece);
  else
    add_inplace(part, piece);
}

void DataParallelHook::finish(size_t b) {
  if (config_.zero_stage >= 2) return;  // finish_oldest did it
  if (config_.compressed()) return finish_compressed(b, bucket_data(b));
  if (staging_.empty()) return;
  FlatRange r{buckets_[b].begin, buckets_[b].end};
  if (!shards_.empty()) {  // only this rank's part holds a sum
    r = my_piece(b);
    if (r.begin >= r.end) return;
  }
  convert_bf16_to_f32(reinterpret_cast<const bf16*>(staging_.data() + r.begin),
                      grads_.data<float>() + r.begin, static_cast<size_t>(r.size()));
}

void DataParallelHook::start_all_remaining() {
  for (size_t b = 0; b < pending_.size(); ++b) pending_[b] = 0;
  start_ready_buckets();
}

void DataParallelHook::micro_batch_done(TrainingRun&, int64_t) {
  if (config_.zero_stage < 2) return;  // the others sum the accumulated gradients at the end
  start_all_remaining();
  new_micro_batch();
  ++micro_;
}

void DataParallelHook::reduce_gradients(TrainingRun&, int64_t) {
  if (idle_on_meta()) return;
  // Parameters the backward did not reach (unused, or a backward cut short by a non-finite loss)
  // are final as they are: every remaining bucket starts, in order.
  const double t0 = now_s();
  if (first_start_ >= 0) stats_.overlap_seconds += t0 - first_start_;
  start_all_remaining();
  while (!in_flight_.empty()) finish_oldest();
  world_.wait_all();
  stats_.wait_seconds += now_s() - t0;
  for (size_t b = 0; b < buckets_.size(); ++b) finish(b);
  ++stats_.steps;
}

void DataParallelHook::after_update(TrainingRun& run, const StepRecord& r) {
  if (!config_.verify_replicas) return;
  const Tensor& p = run.model().params().flat_params();
  if (p.is_meta()) return;
  const double scale = run.mp().scaler().scale();
  // ZeRO-3: no rank holds the whole weights (each its part): the loss scale only.
  const bool whole = !run.model().params().parameters_sharded();
  uint32_t crc = whole ? crc32_reflected<0xEDB88320u>(
                             p.raw_data(), static_cast<size_t>(p.numel()) * dtype_size(p.dtype()), 0)
                       : 0;
  crc = crc32_reflected<0xEDB88320u>(&scale, sizeof scale, crc);
  uint32_t rank0 = crc;
  world_.broadcast(&rank0, sizeof rank0, 0);
  const bool differs = rank0 != crc;
  if (!world_.any(differs)) return;
  // (Appended piece by piece: GCC 12 warns, wrongly, about one long chain of string additions.)
  std::string who =
      differs ? "this rank (" + std::to_string(world_.rank()) + ")" : std::string("another rank");
  std::string msg = "replicas differ after step " + std::to_string(r.step) + ": ";
  msg += who;
  msg += " holds other weights or another loss scale than rank 0";
  throw Error({"verify_replicas"}, msg);
}

}  // namespace mixtrain
