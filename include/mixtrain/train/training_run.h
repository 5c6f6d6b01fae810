// The training engine: one TrainingRun owns the loop over optimizer steps for any Model,
// Optimizer and DataSource under one MixedPrecision, and everything around the loop (logs, the
// progress bar, fault injection, checkpoints, profiling, later gradient all-reduce and numerics
// probes) attaches as a TrainingHook instead of being written into it.
//
// One step (step()):
//   hooks.on_step_begin
//   zero grads; for each of grad_accum micro-batches: batch -> forward under autocast -> loss
//     (a non-finite loss ends the micro-batch loop: the step is skipped) -> backward(loss * scale / K)
//   hooks.reduce_gradients                     (every step: data parallelism sums gradients here)
//   with N ranks: the loss summed over ranks (every rank then agrees whether it is finite)
//   hooks.after_backward                       (only when every loss was finite)
//   unscale + non-finite check + clip -> found_inf reduced over ranks (MAX) -> optimizer step
//     unless non-finite
//   hooks.on_nonfinite                         (only for a non-finite loss or gradient)
//   scaler update (its reason in StepRecord::scale_event)
//   counters (skipped, overflows, non-finite losses in a row, minimum scale reached)
//   hooks.after_update                         (the step's time is final here)
// The loop (run()):
//   hooks.on_run_start (a checkpoint hook restores here and sets the start step)
//   for each step: step(); a diverged step goes to hooks.on_step_end and throws DivergedError;
//     evaluation when due; hooks.on_step_end; stop when any hook's should_stop says so (on any
//     rank: the ranks agree)
// Data parallel (RunConfig::world with N > 1 ranks, as PyTorch DDP): rank r of N reads the
// micro-batches r*K .. r*K+K-1 of each step's N*K, and every loss is divided by N*K, so N ranks
// see exactly the batches of one process with grad_accum N*K and the summed gradients are its
// mean. Gradients are summed by a hook (train/data_parallel.h); evaluation batches are split over
// the ranks and their sums added.
//   final evaluation and the summary; hooks.on_run_end
// ZeRO stage 1 (an optim/zero.h ZeroOptimizer): the hook reduce-scatters instead, each rank
// unscales, checks and clips its part of the gradients (the norm assembled over the ranks,
// MixedPrecision::prepare_step_sharded), updates its part, and the weights are all-gathered.
//
//   Gpt model(cfg, seed, mp.param_dtype(), mp.grad_dtype());
//   auto opt = make_optimizer(model.params(), {.lr = 1e-3f});
//   LmWindows data(corpus, 16, 128, seed);
//   TrainingRun run(model, *opt, mp, data, RunConfig{.steps = 200});
//   run.add_hook(std::make_unique<MyLogger>());
//   TrainSummary s = run.run();
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/core/error.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/models/model.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/optim/schedule.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {

struct RunConfig {
  int64_t steps = 200;     // the last optimizer step
  LrSchedule schedule;     // the learning rate at each step (optim/schedule.h)
  double grad_clip = 1.0;  // global gradient norm limit; 0 disables
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  // How micro-batches' gradients add up. false (fused, the default): each backward adds straight
  // into the gradient buffers (GEMM with beta = 1, in-kernel sums), as Megatron-LM's gradient-
  // accumulation fusion does: no extra memory. true: each micro-batch's gradients are made from
  // zeros and then added to the sum of the earlier ones, parameter by parameter as backward
  // finishes them (autograd::FreshGradScope; PyTorch's AccumulateGrad does this), at the cost of
  // the gradients in progress at a time (a parameter used at both ends of the model, as GPT's tied
  // embedding, for the whole backward); then N ranks with grad_accum 1 and one process with
  // grad_accum N add the same gradients in the same order, and their runs agree bit for bit.
  bool exact_accumulation = false;
  uint64_t seed = 1337;           // the dropout stream (the data source has its own)
  int64_t eval_every = 0;         // evaluate every N steps (and always after the last); 0: only then
  int64_t eval_batches = 8;       // evaluation batches, spread evenly over the data source's; 0: all
  int64_t max_bad_steps = 20;     // non-finite losses in a row before the run is declared diverged
  Communicator* world = nullptr;  // the data-parallel ranks (not owned); null: one process
  // Every rank runs the same forward and backward passes (ZeRO-3, whose passes gather parameters
  // collectively): a micro-batch's backward runs after a non-finite loss too (its gradients are
  // then non-finite and the step is skipped all the same), and in evaluation a rank with fewer
  // batches than another runs one more pass whose result it drops.
  bool lockstep_passes = false;
  void validate() const;  // ArgumentError naming the field
};

// The profiled steps' time per step: each kind of work, "other" (the rest of the step: autograd
// bookkeeping, the data batch, logging) and the whole step, in seconds.
struct StepBreakdown {
  std::array<double, kNumWorkKinds> work{};
  double other = 0;
  double step = 0;
};

struct TrainSummary {
  int64_t steps = 0;
  double final_train_loss = 0;
  double val_loss = 0;
  double val_accuracy = 0;      // top-1 accuracy of the final evaluation (Model::evaluate_batch)
  double unigram_baseline = 0;  // the data source's baseline loss (byte frequencies for text)
  // Text: val_loss in bits per byte of the validation text (DataSource::eval_bytes_per_token), so
  // byte-level and tokenizer runs compare; NaN otherwise.
  double val_bits_per_byte = NAN;
  double tokens_per_s = 0;
  double model_flops_per_s = 0;
  double gemm_flops_per_s = 0;  // measured on this machine for the model's dtype
  double mfu = 0;
  int64_t parameters = 0;
  double elapsed_s = 0;
  std::string precision = "32-true";
  DType gemm_dtype = DType::f32;  // the dtype the model's GEMMs take their inputs in
  // The fp32 GEMMs' precision (kernels/matmul_precision.h) and what the run's GEMMs ran on, per
  // input dtype: f32 (under that precision) and the mode's 16-bit compute dtype, e.g.
  // {"bf16": "brg:avx512_core (bf16 converted to fp32: ...)", "f32": "fp32 (brg:avx512_core)"}.
  std::string matmul_precision = "highest";
  std::map<std::string, std::string> gemm;
  int64_t skipped_steps = 0;  // optimizer steps not applied (non-finite gradients or loss)
  int64_t overflows = 0;      // steps whose gradients held inf/NaN
  bool diverged = false;
  // Why, for a run that returned diverged (its final loss is not finite; one stopped by
  // max_bad_steps throws DivergedError instead), e.g. "the final evaluation's loss is NaN (3 of 5
  // steps skipped)".
  std::string divergence;
  double final_loss_scale = 1.0;
  bool hit_min_scale = false;  // the loss scale was clamped at its minimum at least once
  // Skipped steps by the site where the overflow forensics (train/numerics_hook.h) found the
  // first non-finite value: "transformer.h.3.mlp.c_fc:linear (backward)"; "(loss)" for a
  // non-finite loss, "(unknown)" when nothing looked or the re-run stayed finite.
  std::map<std::string, int64_t> skips_by_site;
  // A stop request (InterruptHook, train/run_hooks.h) ended the run after step `steps`.
  bool interrupted = false;
  int stop_signal = 0;          // the signal that asked for it (SIGINT, SIGTERM)
  std::string checkpoint_path;  // the newest checkpoint this run saved ("" for none)
  // Data parallelism (train/data_parallel.h), on rank 0: ranks, gradient buckets per step, the
  // share of them started during backward, per step the time from the first bucket's start to
  // the end of backward (the window communication could hide in) and the wait for the sums
  // after backward (the communication it did not hide), in seconds.
  int ranks = 1;
  int64_t buckets_per_step = 0;
  double buckets_overlapped = 0;
  double reduce_overlap_s = 0;
  double reduce_wait_s = 0;
  // Bytes of its gradients rank 0 hands the other ranks per step: its pieces of their parts of
  // every bucket, in the reduce dtype (int8: codes and scales); MPI's algorithm may move more.
  double reduce_bytes_per_step = 0;
  double gather_bytes_per_step = 0;  // ZeRO-3: the parameter bytes a rank received (its gathers)
  // ZeRO (optim/zero.h): the stage (0: none), and with N > 1 ranks every rank's tracker peaks
  // by category (MemoryTracker::current(), MemCategory order), rank r at [r]; empty otherwise.
  int zero_stage = 0;
  std::vector<std::array<int64_t, kNumMemCategories>> rank_peaks;
  // This run's tensor memory (MemoryTracker::current(): the peaks were reset when the run was set
  // up), taken when its last step and evaluation ended: before the GEMM-rate measurement for the
  // MFU, whose operands are not the run's. Filled by run_recipe (train/recipe.h).
  MemorySnapshot memory;
  // The process beside the tensors over the same span (tensor/memory.h): its fixed size at the
  // start and its resident peak (issue 28: the allocator's cache, code and data show here).
  ProcessMemory process;
  // With profiling (ProfileHook): the profiled (steady-state) steps only.
  int64_t profiled_steps = 0;
  double profiled_seconds = 0;                    // their total step time
  int64_t profiled_tokens = 0;                    // the tokens their batches held (no padding)
  std::array<double, kNumWorkKinds> breakdown{};  // seconds per kind of work over them
  std::array<int64_t, kNumWorkKinds>
      profiled_bytes{};                        // bytes each kind moved over them (ProfileScope::moves)
  int64_t profiled_system_allocations = 0;     // blocks taken from the system during them
  StepBreakdown breakdown_per_step() const;    // zeros without profiled steps
  double system_allocations_per_step() const;  // 0 without profiled steps
};

// The loss stayed non-finite for max_bad_steps steps in a row: the run stops; the step log up to
// there is kept, and the summary (with diverged = true) travels in the exception.
class DivergedError : public Error {
 public:
  // overflow_site (StepRecord::overflow_site) is named in the message when not empty.
  DivergedError(int64_t step, double loss, int64_t bad_steps, TrainSummary summary,
                const std::string& overflow_site = "");
  // Stopped for another reason that no further step can fix (a loss scale stuck at its minimum).
  DivergedError(int64_t step, const std::string& message, TrainSummary summary);
  int64_t step;
  TrainSummary summary;
};

// What one optimizer step did.
struct StepRecord {
  int64_t step = 0;
  double loss = NAN;  // mean over the micro-batches (NaN / inf when non-finite)
  float lr = 0;
  double grad_norm = NAN;   // of the unscaled gradients, before clipping (NaN when skipped)
  double loss_scale = 1.0;  // the scale this step's losses were multiplied by
  bool loss_finite = true;
  bool found_inf = false;   // a gradient (or the loss) was non-finite
  bool skipped = false;     // the optimizer step was not applied
  bool diverged = false;    // this step ended the run (max_bad_steps non-finite losses in a row)
  double seconds = 0;       // the step's wall time (forward, backward, update)
  int64_t tokens = 0;       // tokens the step's batches held (Batch::real_tokens: no padding)
  double tokens_per_s = 0;  // tokens / seconds
  double elapsed_s = 0;     // since run() started
  bool evaluated = false;   // val_loss holds an evaluation made after this step
  double val_loss = NAN;
  double val_accuracy = NAN;  // with val_loss: top-1 accuracy over the evaluation targets
  // Overflow forensics (a hook's on_nonfinite): the first op whose output went non-finite, as
  // "module:op" plus " (backward)" when its backward rule did; "" when none was found.
  std::string overflow_site;
  // The same in words for the progress line: "first non-finite value at SITE (OP backward, N
  // elements), input amax A, loss scale S", or why nothing was found.
  std::string overflow_detail;
  std::string scale_event;  // why the scaler changed the scale this step ("" when it did not)
  std::string stop_reason;  // with diverged: why, when not the non-finite loss itself
};

class TrainingRun;
class Fp8State;
class ZeroOptimizer;

// Everything around the loop. Hooks run in the order they were added.
class TrainingHook {
 public:
  virtual ~TrainingHook() = default;
  virtual void on_run_start(TrainingRun&) {}
  virtual void on_step_begin(TrainingRun&, int64_t /*step*/) {}
  // After the micro-batches of every step, finite or not (all ranks must take part in the same
  // collectives): the gradients are final on this rank (or abandoned, when a loss was not finite).
  virtual void reduce_gradients(TrainingRun&, int64_t /*step*/) {}
  // After each micro-batch but the step's last (grad_accum > 1), on every rank: after its backward,
  // or in its place when an earlier loss of the step was not finite (then micro_batch() says which
  // one is skipped). ZeRO-2 reduces each micro-batch's gradients here. Not in a replay.
  virtual void micro_batch_done(TrainingRun&, int64_t /*step*/) {}
  virtual void after_backward(TrainingRun&, int64_t /*step*/) {}
  // The step's loss or gradients were non-finite (it will be skipped), before the scaler's
  // update: the hook may re-run the step at the same loss scale (TrainingRun::replay_step) and
  // name the overflow in r.overflow_site.
  virtual void on_nonfinite(TrainingRun&, StepRecord& /*r*/) {}
  virtual void after_update(TrainingRun&, const StepRecord&) {}
  virtual void on_step_end(TrainingRun&, const StepRecord&) {}
  virtual bool should_stop(TrainingRun&, const StepRecord&) { return false; }
  virtual void on_run_end(TrainingRun&, TrainSummary&) {}
};

class TrainingRun {
 public:
  // The model's store must be finalized with mp's dtypes and the optimizer built on it. All four
  // must outlive the run.
  TrainingRun(Model& model, Optimizer& optimizer, MixedPrecision& mp, const DataSource& data,
              RunConfig config);

  template <typename H>
  H& add_hook(std::unique_ptr<H> hook) {
    H& ref = *hook;
    hooks_.push_back(std::move(hook));
    return ref;
  }

  TrainSummary run();  // steps start_step()+1 .. config().steps
  StepRecord step();   // the next optimizer step
  // Inside on_nonfinite only: runs the step's forward and backward again (same batches, dropout
  // streams and loss scale) into zeroed gradients, e.g. under a probe; returns its loss. The step
  // is skipped anyway, so the trajectory does not change.
  double replay_step();
  // Mean loss and top-1 accuracy over config().eval_batches evaluation batches (all of them when
  // 0), with no grad, under autocast.
  struct Evaluation {
    double loss = NAN;
    double accuracy = NAN;
  };
  Evaluation evaluate();

  Model& model() { return model_; }
  Optimizer& optimizer() { return optimizer_; }
  MixedPrecision& mp() { return mp_; }
  // fp8-mixed's layers and histories (amp/fp8.h), or null: checkpoints save and restore them.
  Fp8State* fp8() { return fp8_; }
  void set_fp8(Fp8State* s) { fp8_ = s; }
  // Compressed gradient sums' error feedback (train/data_parallel.h), summed over the ranks, while
  // a checkpoint carries it: set by the data-parallel hook at a step rank 0 saves (for the save)
  // and by a checkpoint's restore (for the hook to hand out at the start); undefined otherwise.
  Tensor& carried_error_feedback() { return carried_error_feedback_; }
  const DataSource& data() const { return data_; }
  const RunConfig& config() const { return config_; }
  TrainSummary& summary() { return summary_; }  // counters live here while running
  int64_t& bad_in_a_row() { return bad_in_a_row_; }
  int64_t completed_steps() const { return step_; }
  int64_t micro_batch() const { return micro_; }  // the micro-batch of this rank being run (0 .. K-1)
  // Inside replay_step: this rank re-runs a skipped step alone (no collectives may start).
  bool replaying() const { return replaying_; }
  int rank() const { return config_.world ? config_.world->rank() : 0; }
  int world_size() const { return config_.world ? config_.world->size() : 1; }
  int64_t start_step() const { return start_step_; }
  // Continue after `step` (a checkpoint restore, in on_run_start).
  void set_start_step(int64_t step);
  // The most tokens an optimizer step can hold, over all ranks: batch_size * sequence_length *
  // grad_accum * ranks. Rates count the tokens actually read (StepRecord::tokens), which is less
  // with padding.
  int64_t tokens_per_step() const;

 private:
  void finish_summary();
  // Zeroes the gradients and runs this rank's micro-batches of `step`: forward, loss * scale /
  // (N*K), backward. Returns its share of the mean loss and counts the tokens read (padding not
  // counted); loss_finite false stops at the first non-finite loss.
  double forward_backward(int64_t step, bool& loss_finite, int64_t& tokens);
  void sum_over_ranks(EvalSums& s);  // evaluation sums of every rank's share

  Model& model_;
  Optimizer& optimizer_;
  const ZeroOptimizer* zero_ = nullptr;  // the optimizer, when it is ZeRO's (optim/zero.h)
  MixedPrecision& mp_;
  Fp8State* fp8_ = nullptr;
  Tensor carried_error_feedback_;
  const DataSource& data_;
  RunConfig config_;
  std::vector<std::unique_ptr<TrainingHook>> hooks_;
  TrainSummary summary_;
  int64_t step_ = 0;  // completed optimizer steps
  int64_t start_step_ = 0;
  int64_t bad_in_a_row_ = 0;   // consecutive non-finite losses
  bool in_nonfinite_ = false;  // hooks' on_nonfinite runs (replay_step allowed)
  bool replaying_ = false;     // inside replay_step
  int64_t micro_ = 0;          // the micro-batch being run
  double train_time_ = 0;      // seconds inside step() since the start
  int64_t train_tokens_ = 0;   // tokens read by step() since the start
  double run_start_ = 0;       // steady-clock seconds at run()
  Batch batch_;                // the training batch, reused
};

}  // namespace mixtrain
