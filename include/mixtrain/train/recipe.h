// A Recipe is what makes a task a task: its data, its model (built or loaded), the length and
// schedule of its run, what a checkpoint holds beyond the engine's state, and any hooks of its
// own. Everything else about a run is the same for every task and is done once, by run_recipe():
// the data-parallel ranks (and their agreement on the options and the data), the output-path checks and the
// checkpoint directory's lock, the predicted-memory check (RunOptions::force skips it), the precision mode,
// the optimizer (ZeRO's part under mpirun), the RunConfig, the standard hooks (interrupt, data parallel,
// fault injection, numerics, step log, TensorBoard, progress), the MFU.
//
// Built in: language-model pre-training (train(), trainer.h: GPT on a text corpus) and sequence
// classification (finetune(), finetune.h: a pretrained encoder on labelled text).
//
//   class MyTask : public Recipe { ... };
//   MyTask task(...);
//   TrainSummary s = run_recipe(task, options);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/amp/precision.h"
#include "mixtrain/dist/rank_agreement.h"
#include "mixtrain/models/model.h"
#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

// A path a recipe reads or writes, named as its options spell it ("model_dir"), so that an error
// can say the flag.
struct RecipePath {
  std::string what;
  std::string path;
};

class Recipe {
 public:
  virtual ~Recipe() = default;

  // What the recipe reads (files or directories) and the directories it writes into, checked with
  // the run's own logs and checkpoints before anything is loaded (one output never over an input).
  virtual std::vector<RecipePath> inputs(const RunOptions&) const { return {}; }
  virtual std::vector<RecipePath> output_dirs(const RunOptions&) const { return {}; }

  // Loads the data, once per run_recipe() (the memory prediction reuses it): `ranks` data-parallel
  // ranks train together. ArgumentError / IoError naming the option or the file.
  virtual void prepare(const RunOptions& opt, int ranks) = 0;
  // What the data-parallel ranks must agree on besides the options every task shares (after
  // prepare): the recipe's own options and a fingerprint of its data (dist/rank_agreement.h).
  virtual std::vector<AgreedField> agreement(const RunOptions&) const { return {}; }
  // The data source (after prepare).
  virtual const DataSource& data() const = 0;
  // A new model with its weights in `spec`'s dtypes and `weights` as their memory category (the
  // fp32 master weights in the *-mixed modes): once for the memory prediction on the meta device,
  // once for the run.
  virtual std::unique_ptr<Model> make_model(const PrecisionSpec& spec, MemCategory weights,
                                            const RunOptions& opt) = 0;
  // The run's length and learning-rate schedule; run_recipe fills in the rest of `rc` from opt
  // (clipping, accumulation, seed, evaluation, divergence, ranks) before calling it.
  virtual void configure(RunConfig& rc, const RunOptions& opt) const = 0;
  // The checkpoint hook: the run as one process records it (`one_process`), and what a checkpoint
  // holds besides the engine's state (the model files, the data's checksum). Null: the task keeps
  // no checkpoints, and run_recipe refuses the checkpoint options.
  virtual std::unique_ptr<TrainingHook> checkpointing(const RunOptions& one_process, Model& model) = 0;
  // Hooks after the standard ones (and before RunOptions::add_hooks); once per run.
  virtual void add_hooks(TrainingRun&, const RunOptions&) {}
  // After the run returned (not interrupted, not diverged, not on the meta device), on the rank
  // that writes (rank 0): e.g. saving the trained model.
  virtual void finish(Model&, const TrainSummary&, const RunOptions&) {}
  // Whether finish reads the model's weights (with ZeRO-3 every rank then gathers them whole at
  // the end of the run, for rank 0's finish).
  virtual bool finish_reads_weights(const RunOptions&) const { return false; }
};

// Runs `recipe` with the options every task shares (opt: validated by the caller, e.g.
// RunOptions::validate). Throws what the recipe throws, ArgumentError for a path conflict or a
// predicted peak over the available memory (unless opt.force), DivergedError for a diverged run.
TrainSummary run_recipe(Recipe& recipe, const RunOptions& opt);

// The options of a run made only to be measured (a memory prediction on the meta device, the
// numerics advice's trial runs): quiet, no files read or written beyond the inputs (no step log,
// numerics log, TensorBoard, checkpoints, resume), no probes, forensics or profiling, no caller
// hooks, not interruptible, no GEMM-rate measurement. The one list of what such a run turns off.
RunOptions measured_run_options(RunOptions opt);

// GF/s of one GEMM shape in `dtype` (f32 out), best of repeated runs for ~`seconds`: the rate the
// MFU divides by.
double measure_gemm_flops(DType dtype, int64_t m, int64_t n, int64_t k, double seconds);

}  // namespace mixtrain
