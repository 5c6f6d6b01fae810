// `mixtrain finetune` as a function: a pretrained encoder (models/encoder.h) with a new
// classification head fine-tuned on labelled text (data/classification_batches.h) for whole
// epochs, the way Hugging Face's Trainer does it by default: AdamW, a linear warm-up / linear decay
// schedule (optim/schedule.h, ScheduleKind::linear), dynamic padding, evaluation on the whole test
// set after each epoch. Precision, loss scaling, optimizer, checkpoints and logs are train()'s
// options (RunOptions), attached to the same TrainingRun and hooks.
//
//   FinetuneOptions o;            // the MiniLM weights and the Fine Foods reviews by default
//   o.epochs = 1;
//   o.train.precision = PrecisionMode::mixed_bf16;
//   FinetuneSummary s = finetune(o);
//   s.test_accuracy(), s.majority_baseline, s.epochs[0].test_loss
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/data/text_classification.h"
#include "mixtrain/models/encoder.h"
#include "mixtrain/train/bench_train.h"
#include "mixtrain/train/compare.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/memory_report.h"
#include "mixtrain/train/train_options.h"

namespace mixtrain {

struct FinetuneOptions {
  // The options shared with train(): precision, scaler, optimizer (lr, weight decay, betas,
  // grad clip), seed, warm-up, grad_accum, eval_every, eval_batches (0: the whole test set),
  // step log, TensorBoard, checkpoints (not init_from: the model directory is the start), progress.
  // train.steps: unset runs every epoch; N stops after N optimizer steps (the schedule still spans
  // the epochs).
  RunOptions train = defaults();
  std::string model_dir;  // config.json + model.safetensors + vocab.txt; empty: the built-in MiniLM
  std::string task;       // "finefoods" or "fortunes" (a built-in data set); empty: train_path / test_path
  std::string train_path, test_path;  // .tsv, .csv or .jsonl (data/text_classification.h)
  TextColumns columns;
  int64_t train_examples = 0;  // use only the first N training examples; 0: all
  int64_t test_examples = 0;   // the same for the test set
  int64_t max_len = 128;       // tokens per sequence with the specials (truncation)
  int64_t epochs = 1;
  Pooling pooling = Pooling::cls;
  float dropout = 0.1f;
  std::string save_dir;   // write the fine-tuned model here (save_encoder_classifier); empty: not saved
  void validate() const;  // ArgumentError naming the field

  // Hugging Face's TrainingArguments defaults where they differ from train()'s: lr 5e-5, weight
  // decay 0.01 (here: on matrices only), betas (0.9, 0.999), eps 1e-8, no gradient clipping, batch 16.
  static RunOptions defaults();
};

// One epoch's end (the evaluation after its last step).
struct FinetuneEpoch {
  int64_t epoch = 0;      // from 1
  int64_t step = 0;       // the optimizer step it ended at
  double train_loss = 0;  // mean of its steps' losses (those run in this process)
  double test_loss = 0;
  double test_accuracy = 0;
  double elapsed_s = 0;  // since the run started
};

struct FinetuneSummary {
  TrainSummary run;  // val_loss / val_accuracy: the final test loss and accuracy
  std::vector<FinetuneEpoch> epochs;
  std::vector<std::string> labels;  // class id -> label
  double majority_baseline = 0;     // the test set's majority-class accuracy
  int64_t train_examples = 0, test_examples = 0;
  int64_t steps_per_epoch = 0;
  double train_seconds = 0;  // time spent in optimizer steps (no evaluation, no loading)
  double test_accuracy() const { return run.val_accuracy; }
};

// The fine-tune diverged (train()'s DivergedError), with what the fine-tune knew by then: the data
// set's sizes, labels and majority baseline, the epochs completed, the run's summary.
class FinetuneDivergedError : public DivergedError {
 public:
  FinetuneDivergedError(const DivergedError& e, FinetuneSummary s)
      : DivergedError(e), finetune(std::move(s)) {}
  FinetuneSummary finetune;  // finetune.run == summary
};

// Loads, trains, evaluates after every epoch, saves. Throws ArgumentError / IoError for bad
// options or input (naming the file and line, or the field), FinetuneDivergedError where train()
// throws DivergedError.
FinetuneSummary finetune(const FinetuneOptions& o);

// compare_precisions (train/compare.h) for the fine-tune: `base` once per entry, its precision and
// rounding from the entry; each row's summary is the run's (val_accuracy: the final test accuracy,
// elapsed_s: training and the per-epoch evaluations). `majority_baseline`, when given, receives the
// test set's majority-class accuracy before the first run.
CompareResult compare_finetune(const FinetuneOptions& base, const std::vector<CompareEntry>& entries,
                               const std::function<void(const CompareRun&)>& on_run = {},
                               double* majority_baseline = nullptr);

// The memory finetune(o) needs, predicted by running it on the meta device (its first two steps
// and the evaluation, with no files read beyond its inputs and none written).
MemoryPrediction predict_finetune_memory(const FinetuneOptions& o);

// memory_report (train/memory_report.h) for the fine-tune: its first o.train.steps steps (all of
// them when 0) on the meta device and, unless predict_only, measured over a real run.
MemoryReport finetune_memory_report(const FinetuneOptions& o, bool predict_only, int ranks = 1);

// bench_train (train/bench_train.h) for the fine-tune: o.train.steps optimizer steps (it must be
// more than o.train.profile_warmup), the tokens counted without padding.
BenchTrainResult bench_finetune(const FinetuneOptions& o, bool thread_scaling,
                                const std::function<void(const BenchTrainRun&)>& on_run = {});

}  // namespace mixtrain
