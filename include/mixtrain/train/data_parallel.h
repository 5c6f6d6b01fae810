// Data parallelism across ranks as a TrainingHook (PyTorch DDP's design): every rank holds the
// whole model; at the start rank 0's weights go to every rank; in each step the flat gradient
// buffer (nn/parameters.h) is summed over ranks in buckets, and a bucket's sum starts from a
// backward callback (autograd::GradReadyScope) as soon as all of its parameters' gradients are
// final, so communication overlaps the rest of backward. Buckets cover the parameters in reverse
// order (the order backward finishes them) and start strictly in bucket order, so every rank
// issues the same collectives in the same order even when its backward was cut short.
// With ZeRO stage 1 (zero_stage = 1; the run's optimizer must then be a ZeroOptimizer,
// optim/zero.h) each bucket is reduce-scattered instead: every rank receives the summed
// gradient of its own part of the bucket only (the same sums, in the same order, as the
// all-reduce's), and the rest of its gradient buffer is left stale.
// With ZeRO stage 2 (zero_stage = 2; the model's store built inside a GradientPartScope giving this
// rank's part, nn/parameters.h) the gradient buffer holds only that part: backward hands each
// parameter's finished gradient over (autograd::GradHandoffScope) and it is copied into its
// bucket's own buffer, allocated at the bucket's first gradient (which backward then accumulates
// there directly, unless the bucket travels in bf16 and the gradients are fp32: then the finished
// gradient is rounded into it); a full bucket is reduce-scattered
// from there, and once done this rank's piece goes into its part of the buffer and the bucket's
// buffer is freed. At most kZero2InFlight buckets are in flight: starting one more first completes
// the oldest, so what a rank holds is its part plus a few buckets, never the whole gradient, and
// the same at every run (the memory prediction's). Every micro-batch is reduced this way (DeepSpeed's
// stage 2): with grad_accum 1 the sums are ZeRO-1's, bit for bit; with more, each micro-batch is
// summed over ranks before the micro-batches are added (a different rounding order than ZeRO-1's).
//
//   DataParallelHook& dp = run.add_hook(std::make_unique<DataParallelHook>(world(), DataParallelConfig{}));
//   // TrainingRun's RunConfig::world must be the same communicator (data split, loss sums).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "mixtrain/autograd/variable.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

struct DataParallelConfig {
  // The dtype gradients travel and are summed in: f32 (exact fp32 sums; 16-bit gradients travel
  // in their own dtype, summed in fp32) or bf16 (half the bytes of fp32 gradients: each rank's
  // gradient is rounded to bf16 and the sums are rounded to bf16 after each fp32 add), or i8
  // (ZeRO 1 or 2 with fp32 gradients: a quarter of the bytes; each rank's pieces for the other
  // ranks quantized in blocks with error feedback, dist/compressed_pieces.h, sent by an all-to-all, and
  // summed in fp32 in rank order by their receiver, its own piece unquantized).
  // f8_e4m3 (fp8): as i8 with fp8 E4M3 codes, a scale per block mapping its absmax to 448.
  DType reduce_dtype = DType::f32;
  bool compressed() const { return reduce_dtype == DType::i8 || reduce_dtype == DType::f8_e4m3; }
  int64_t bucket_bytes = int64_t{25} << 20;  // per bucket, in reduce_dtype (PyTorch DDP's 25 MiB)
  // After every step, check that every rank holds rank 0's weights and loss scale (a CRC-32 of
  // them compared over ranks; an Error naming the step and the rank otherwise): a test and
  // debugging aid, one pass over the weights per step.
  bool verify_replicas = false;
  // 0: every rank receives the whole summed gradient (all-reduce); 1: ZeRO stage 1 (reduce-scatter
  // to the ranks' parts of the arena, optim/zero.h); 2: ZeRO stage 2 (and only the part is held);
  // 3: ZeRO stage 3 (the gradients as 2; the parameters sharded, train/param_shards.h).
  int zero_stage = 0;
  // ZeRO-3's parameter gathers (train/param_shards.h): f32, every buffer travels in its own dtype
  // (exact); bf16, fp32 buffers travel rounded to bf16 to nearest even (16-bit ones as they are);
  // i8 or f8_e4m3, every buffer in blocks of 2048 with an fp32 scale each (dist/compressed_pieces.h,
  // ZeRO++'s quantized weights; no error feedback: weights are sent afresh each time). The
  // checkpoint's and the run's final gathers are exact whatever this says.
  DType allgather_dtype = DType::f32;
  bool gathers_compressed() const { return allgather_dtype != DType::f32; }
  // ArgumentError naming grad_reduce_dtype / allgather_dtype / bucket_bytes / zero
  void validate(DType grad_dtype) const;
};

// How the sums overlapped backward, over the steps so far.
struct DataParallelStats {
  int64_t steps = 0;
  int64_t buckets_per_step = 0;
  int64_t started_in_backward = 0;  // buckets started from the backward callback (the rest: after it)
  double overlap_seconds = 0;       // from the first bucket's start to the end of backward: the
                                    // time communication had to hide in
  double wait_seconds = 0;          // time spent waiting for sums after backward
  double bytes_sent = 0;            // this rank's pieces for the others (the reduction's payload)
};

// ZeRO-2: the buckets whose reduce-scatter may run at once (starting another completes the oldest).
inline constexpr size_t kZero2InFlight = 2;

class DataParallelHook final : public TrainingHook {
 public:
  // Whether rank 0 saves a checkpoint after this step (every rank asks): the compressed sums'
  // error feedback is summed over the ranks at those steps, for the save
  // (TrainingRun::carried_error_feedback). Null: no checkpoints.
  using SaveDue = std::function<bool(TrainingRun& run, int64_t step)>;
  DataParallelHook(Communicator& world, DataParallelConfig config, SaveDue rank0_saves = nullptr);
  ~DataParallelHook() override;

  // Buckets; rank 0's weights to every rank; a restored error feedback handed out to the ranks
  // (each part's sum to the next rank: exactly what each rank held when saved by 2 ranks; with
  // more, or another count, the same total not yet sent, spread differently).
  void on_run_start(TrainingRun& run) override;
  void on_step_begin(TrainingRun& run, int64_t step) override;
  void on_step_end(TrainingRun& run, const StepRecord& record) override;  // error feedback for a save
  void reduce_gradients(TrainingRun& run, int64_t step) override;
  void micro_batch_done(TrainingRun& run, int64_t step) override;  // ZeRO-2: this micro-batch's sums
  void after_update(TrainingRun& run, const StepRecord& record) override;
  void on_run_end(TrainingRun& run, TrainSummary& summary) override;

  struct Bucket {
    int64_t begin = 0, end = 0;  // flat gradient elements [begin, end), alignment padding included
    std::vector<size_t> params;  // parameter indices, in reverse declaration order
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const DataParallelStats& stats() const { return stats_; }

 private:
  void build_buckets(const ParameterStore& store);
  void hand_out_error_feedback(TrainingRun& run);  // a restored checkpoint's, into residual_
  void on_grad_ready(const Tensor& grad);
  // The parameter whose gradient-buffer view this is (none: another store's, or not a parameter).
  std::optional<size_t> param_of(const Tensor& buffer) const;
  // This rank's piece of bucket b: the elements of its part in the bucket (may be empty).
  FlatRange my_piece(size_t b) const;
  // The dtype a bucket's gradients travel in: bf16 when reduce_dtype is, else the gradients' own.
  DType bucket_dtype(DType grad_dtype) const {
    return config_.reduce_dtype == DType::bf16 ? DType::bf16 : grad_dtype;
  }
  // On the meta device (a prediction) only ZeRO-2's and the compressed sums' buffers need following.
  bool idle_on_meta() const { return grads_.is_meta() && config_.zero_stage < 2 && !config_.compressed(); }
  Tensor bucket_slot(size_t param, int64_t numel);          // ZeRO-2: its place in its bucket's buffer
  Tensor grad_place(const Tensor& buffer);                  // ZeRO-2: a view of the bucket's buffer
  void on_grad_handoff(const Tensor& buffer, Tensor grad);  // ZeRO-2
  Tensor& bucket_grads(size_t b);                           // allocated (zeros) at its first use
  void mark_ready(size_t param);
  void new_micro_batch();
  void start_all_remaining();
  void finish_oldest();  // ZeRO-2: completes the oldest bucket in flight, its piece into the part
  // int8 / fp8: quantizes bucket b's pieces for the other ranks (data: its element 0) and starts the
  // all-to-all; once done, sums this rank's piece in rank order in place.
  void start_compressed(size_t b, std::span<const int64_t> counts, float* data);
  void finish_compressed(size_t b, float* data);
  float* bucket_data(size_t b);  // element 0 of bucket b's gradients (ZeRO-2: its own buffer)
  void start_ready_buckets();    // the next buckets in order whose parameters are all ready
  void start(size_t b);
  void finish(size_t b);  // bf16: the sum back into the fp32 gradients
  // ZeRO: how many elements of [begin, end) each rank's part holds (the reduce-scatter's counts).
  std::vector<int64_t> piece_counts(int64_t begin, int64_t end) const;

  Communicator& world_;
  DataParallelConfig config_;
  SaveDue rank0_saves_;
  TrainingRun* run_ = nullptr;
  Tensor grads_;  // (flat_numel) the store's gradient buffer
  std::vector<Bucket> buckets_;
  std::unordered_map<int64_t, size_t> param_at_;  // gradient offset -> parameter index
  std::vector<size_t> bucket_of_;                 // parameter index -> bucket
  std::vector<char> ready_;                       // per parameter, this step
  std::vector<int64_t> pending_;                  // per bucket: parameters not yet ready
  size_t next_ = 0;                               // the next bucket to start
  double first_start_ = -1;                       // steady-clock seconds of this step's first start
  std::vector<uint16_t> staging_;                 // (flat_numel) bf16 words for fp32 gradients
  std::vector<FlatRange> shards_;                 // ZeRO: every rank's part of the arena; empty otherwise
  // ZeRO-2: each bucket's buffer while it fills or is reduced (undefined otherwise; bf16 when
  // reduce_dtype is), and the buckets in flight, oldest first, with their micro-batch.
  std::vector<Tensor> bucket_grads_;
  // int8 / fp8: the error feedback (flat_numel, fp32, unscaled; dist/compressed_pieces.h) and each bucket's
  // quantized pieces in flight, sent and received.
  Tensor residual_;
  std::vector<Tensor> pieces_send_, pieces_recv_;
  std::vector<std::pair<size_t, int64_t>> in_flight_;
  int64_t micro_ = 0;  // ZeRO-2: the micro-batch being reduced (micro_batch_done counts them)
  std::unique_ptr<autograd::GradReadyScope> scope_;
  std::unique_ptr<autograd::GradHandoffScope> handoff_;
  DataParallelStats stats_;
};

}  // namespace mixtrain
