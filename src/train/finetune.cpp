// `mixtrain finetune`: the encoder, the tokenized data and the TrainingRun assembled from
// FinetuneOptions (train/finetune.h); the loop is train/training_run.cpp.
#include "mixtrain/train/finetune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checksum.h"
#include "kernels/backend.h"
#include "kernels/gemm_info.h"
#include "mixtrain/data/builtin_data.h"
#include "mixtrain/data/classification_batches.h"
#include "mixtrain/data/wordpiece.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/tensor/allocator.h"
#include "mixtrain/tensor/device.h"
#include "mixtrain/train/classify.h"
#include "mixtrain/train/run_hooks.h"
#include "mixtrain/train/tensorboard_hook.h"
#include "train/dir_lock.h"
#include "train/finetune_checkpointing.h"
#include "train/observer_hooks.h"
#include "train/output_paths.h"
#include "train/rank_setup.h"

namespace mixtrain {
namespace fs = std::filesystem;

TrainOptions FinetuneOptions::defaults() {
  TrainOptions t;
  t.lr = 5e-5f;
  t.weight_decay = 0.01f;
  t.beta1 = 0.9f;
  t.beta2 = 0.999f;
  t.eps = 1e-8f;
  t.grad_clip = 1.0f;
  t.batch_size = 16;
  t.warmup = 0;
  t.steps = 0;         // every epoch
  t.eval_batches = 0;  // the whole test set
  return t;
}

void FinetuneOptions::validate() const {
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  if (max_len < 2) bad("max_len", " must be at least 2, got " + std::to_string(max_len));
  if (epochs < 1) bad("epochs", " must be positive, got " + std::to_string(epochs));
  if (train_examples < 0) bad("train_examples", " must be >= 0 (0: all), got " + std::to_string(train_examples));
  if (test_examples < 0) bad("test_examples", " must be >= 0 (0: all), got " + std::to_string(test_examples));
  if (!(dropout >= 0.f && dropout < 1.f)) bad("dropout", " must be in [0, 1)");
  if (!task.empty() && task != "finefoods" && task != "fortunes")
    bad("task", " must be finefoods or fortunes, got '" + task + "'");
  if (!task.empty() && (!train_path.empty() || !test_path.empty()))
    throw ArgumentError({"task", "train_path"}, "task and train_path / test_path exclude each other");
  if (train_path.empty() != test_path.empty())
    throw ArgumentError({"train_path", "test_path"}, "train_path and test_path go together");
  if (train.steps < 0) bad("steps", " must be >= 0 (0: every epoch), got " + std::to_string(train.steps));
  if (train.eval_batches < 0) bad("eval_batches", " must be >= 0 (0: the whole test set)");
  if (!train.checkpoint.init_from.empty())
    throw ArgumentError({"checkpoint.init_from"}, "checkpoint.init_from does not apply to a fine-tune (model_dir is the start)");
  TrainOptions t = train;  // train()'s own checks, with the fields that mean "all" here filled in
  t.steps = std::max<int64_t>(t.steps, 1);
  t.warmup = 0;
  t.eval_batches = std::max<int64_t>(t.eval_batches, 1);
  t.validate();
  train.checkpoint.validate();
  if (train.warmup < 0) bad("warmup", " must be >= 0, got " + std::to_string(train.warmup));
}

namespace {

std::string model_dir_of(const FinetuneOptions& o) {
  return o.model_dir.empty() ? builtin_data_path(kDefaultEncoderModel) : o.model_dir;
}

// The first n examples (all when n is 0 or more than there are).
void keep_first(TextClassificationData& d, int64_t n) {
  if (n > 0 && n < int64_t(d.examples.size())) d.examples.resize(size_t(n));
}

TextClassificationTask load_task(const FinetuneOptions& o) {
  TextClassificationTask t;
  if (o.task == "fortunes") {
    t = fortunes_topic_task();
  } else if (o.task == "finefoods" || o.train_path.empty()) {
    t = finefoods_task();
  } else {
    t.name = o.train_path;
    t.train = TextClassificationData::load(o.train_path, o.columns);
    t.test = TextClassificationData::load(o.test_path, o.columns, &t.train.labels);
  }
  keep_first(t.train, o.train_examples);
  keep_first(t.test, o.test_examples);
  if (t.train.labels.size() < 2)
    throw ArgumentError("training set " + t.train.path + " has " + std::to_string(t.train.labels.size()) +
                        " label(s): a classifier needs at least 2");
  if (t.test.examples.empty()) throw ArgumentError("test set " + t.test.path + " holds no examples");
  return t;
}

// A checksum of the tokenized data: a resumed run must read the same batches.
std::string data_checksum(const ClassificationBatches& d) {
  std::vector<int32_t> all;
  for (const auto* set : {&d.train_encodings(), &d.test_encodings()})
    for (const Encoding& e : *set) {
      all.push_back(int32_t(e.ids.size()));
      all.insert(all.end(), e.ids.begin(), e.ids.end());
      all.insert(all.end(), e.type_ids.begin(), e.type_ids.end());
    }
  return crc32_hex(crc32(reinterpret_cast<const uint8_t*>(all.data()), all.size() * sizeof(int32_t)));
}

// Records each epoch's end (an evaluation at a multiple of steps_per_epoch, or the last step) and
// prints a line for it.
class EpochHook final : public TrainingHook {
 public:
  EpochHook(FinetuneSummary& out, int64_t steps_per_epoch, int64_t epochs, bool quiet)
      : out_(out), per_epoch_(steps_per_epoch), epochs_(epochs), quiet_(quiet) {}
  void on_step_end(TrainingRun& run, const StepRecord& r) override {
    loss_sum_ += r.loss;
    ++steps_;
    out_.train_seconds += r.seconds;
    const bool end = r.step % per_epoch_ == 0 || r.step == run.config().steps;
    if (!r.evaluated || !end) return;
    FinetuneEpoch e;
    e.epoch = (r.step + per_epoch_ - 1) / per_epoch_;
    e.step = r.step;
    e.train_loss = loss_sum_ / double(steps_);
    e.test_loss = r.val_loss;
    e.test_accuracy = r.val_accuracy;
    e.elapsed_s = r.elapsed_s;
    out_.epochs.push_back(e);
    loss_sum_ = 0;
    steps_ = 0;
    if (quiet_) return;
    std::printf("epoch %lld/%lld (step %lld): train loss %.4f, test loss %.4f, test accuracy %.2f%% (majority %.2f%%), %.0f s\n",
                static_cast<long long>(e.epoch), static_cast<long long>(epochs_), static_cast<long long>(e.step),
                e.train_loss, e.test_loss, 100 * e.test_accuracy, 100 * out_.majority_baseline, e.elapsed_s);
    std::fflush(stdout);
  }

 private:
  FinetuneSummary& out_;
  int64_t per_epoch_, epochs_;
  bool quiet_;
  double loss_sum_ = 0;
  int64_t steps_ = 0;
};

RunPaths finetune_paths(const FinetuneOptions& o) {
  RunPaths p = train_run_paths(o.train);  // the step log, checkpoints, resume
  p.inputs.push_back({"model_dir", model_dir_of(o)});
  if (!o.train_path.empty()) p.inputs.push_back({"train_path", o.train_path});
  if (!o.test_path.empty()) p.inputs.push_back({"test_path", o.test_path});
  if (!o.save_dir.empty()) p.output_dirs.push_back({"save_dir", o.save_dir});
  return p;
}

}  // namespace

FinetuneSummary finetune(const FinetuneOptions& o_in) {
  o_in.validate();
  FinetuneOptions o = o_in;
  TrainOptions& t = o.train;
  if (t.log_jsonl == "-") t.quiet = true;  // stdout carries the log
  // Under mpirun (t.world of N > 1): data parallel as train() is (train/rank_setup.h); rank 0
  // alone writes the logs, checkpoints and the saved model.
  const RankSetup ranks = setup_ranks(t);
  if (ranks.world != nullptr && ranks.world->rank() != 0) o.save_dir.clear();
  const bool meta = default_device().is_meta();
  if (!meta) check_run_paths(finetune_paths(o));
  DirectoryLock lock;
  if (!t.checkpoint.dir.empty() && !meta) lock = DirectoryLock(t.checkpoint.dir, "checkpoint.dir");
  const std::string dir = model_dir_of(o);
  const TextClassificationTask task = load_task(o);
  const WordPieceTokenizer tokenizer = tokenizer_from_model_dir(dir);
  const ClassificationBatches data(task.train, task.test, tokenizer, t.batch_size, o.max_len, t.seed);

  FinetuneSummary out;
  out.labels = task.train.labels;
  out.majority_baseline = data.majority_baseline();
  out.train_examples = int64_t(task.train.examples.size());
  out.test_examples = int64_t(task.test.examples.size());
  // One optimizer step takes grad_accum batches on each of N ranks; an epoch ends with the step
  // that reads its last.
  const int64_t per_step = t.grad_accum * ranks.ranks();
  out.steps_per_epoch = (data.batches_per_epoch() + per_step - 1) / per_step;
  const int64_t total = out.steps_per_epoch * o.epochs;

  const PrecisionSpec& spec = precision_spec(t.precision);
  MixedPrecision mp(spec.name, t.scaler, t.force_loss_scaling);
  gemm_scratch_release();  // the peaks are this run's: no GEMM temporaries of an earlier one
  MemoryTracker::current().reset_peaks();
  // In the *-mixed modes the fp32 arena is the master copy of the 16-bit working weights.
  const bool masters = spec.autocast && spec.param_dtype == DType::f32;
  ClassifierOptions co;
  co.labels = task.train.labels;
  co.pooling = o.pooling;
  co.dropout = o.dropout;
  co.seed = t.seed;
  std::unique_ptr<Model> model = load_encoder_classifier(dir, co, spec.param_dtype, spec.grad_dtype,
                                                         masters ? MemCategory::master_weights : MemCategory::parameters);
  const int64_t positions = encoder_info(*model).max_positions;
  if (o.max_len > positions)
    throw ArgumentError({"max_len"}, "max_len " + std::to_string(o.max_len) + " exceeds the model's " +
                                         std::to_string(positions) + " positions (" + dir + "/config.json)");
  model->set_activation_checkpointing(t.checkpoint_activations);
  const std::unique_ptr<Optimizer> optimizer = make_run_optimizer(ranks, model->params(), t);

  RunConfig rc;
  rc.steps = t.steps > 0 ? std::min(t.steps, total) : total;
  rc.schedule.kind = ScheduleKind::linear;
  rc.schedule.max_lr = t.lr;
  rc.schedule.warmup_steps = std::min(t.warmup, total);
  rc.schedule.total_steps = total;
  rc.grad_clip = t.grad_clip;
  rc.grad_accum = t.grad_accum;
  rc.exact_accumulation = t.exact_grad_accum;
  rc.seed = t.seed;
  rc.eval_every = t.eval_every > 0 ? t.eval_every : out.steps_per_epoch;
  rc.eval_batches = t.eval_batches;
  rc.max_bad_steps = t.max_bad_steps_or_default();
  rc.world = ranks.world;
  TrainingRun run(*model, *optimizer, mp, data, rc);

  nlohmann::json run_options;
  run_options["model"] = nlohmann::json::parse(model->config_json());
  run_options["data"] = {{"task", task.name}, {"train", out.train_examples}, {"test", out.test_examples},
                         {"tokens_crc32", data_checksum(data)}};
  run_options["max_len"] = o.max_len;
  run_options["epochs"] = o.epochs;
  run_options["pooling"] = o.pooling == Pooling::cls ? "cls" : "mean";
  run_options["dropout"] = o.dropout;
  if (t.stop_signal) run.add_hook(std::make_unique<InterruptHook>(t.stop_signal));
  run.add_hook(std::make_unique<FinetuneCheckpointing>(as_one_process(t, ranks), std::move(run_options)));
  add_data_parallel_hooks(run, ranks, t);
  add_observer_hooks(run, t);
  run.add_hook(std::make_unique<EpochHook>(out, out.steps_per_epoch, o.epochs, t.quiet));
  if (t.add_hooks) t.add_hooks(run);
  const KeepFp32Scope keep(t.keep_fp32);
  if (!t.quiet) {
    std::printf("fine-tuning %s on %s: %lld train / %lld test examples, %zu labels, %lld steps (%lld per epoch), %s\n",
                dir.c_str(), task.name.c_str(), static_cast<long long>(out.train_examples),
                static_cast<long long>(out.test_examples), out.labels.size(), static_cast<long long>(rc.steps),
                static_cast<long long>(out.steps_per_epoch), std::string(spec.name).c_str());
    std::fflush(stdout);
  }
  try {
    out.run = run.run();
  } catch (const DivergedError& e) {
    out.run = e.summary;
    throw FinetuneDivergedError(e, out);
  }
  if (!o.save_dir.empty() && !meta && !out.run.interrupted) {
    save_encoder_classifier(*model, o.save_dir, dir);
    if (!t.quiet) std::printf("model saved: %s\n", o.save_dir.c_str());
  }
  return out;
}

CompareResult compare_finetune(const FinetuneOptions& base, const std::vector<CompareEntry>& entries,
                               const std::function<void(const CompareRun&)>& on_run, double* majority_baseline) {
  base.validate();
  if (majority_baseline) *majority_baseline = load_task(base).test.majority_baseline();
  return compare_precisions(base.train, entries, on_run, [&](const TrainOptions& t) {
    FinetuneOptions o = base;
    o.train = t;
    return finetune(o).run;
  });
}

MemoryPrediction predict_finetune_memory(const FinetuneOptions& o) {
  FinetuneOptions m = o;
  TrainOptions& t = m.train;
  t.quiet = true;
  t.log_jsonl.clear();
  t.checkpoint = CheckpointOptions{};  // no files: resuming or saving would read or write them
  t.tensorboard_dir.clear();
  t.add_hooks = nullptr;
  t.stop_signal = nullptr;
  t.steps = t.steps > 0 ? std::min<int64_t>(t.steps, 2) : 2;  // the peak is reached in the first two steps
  t.inject_nonfinite.clear();
  m.save_dir.clear();
  FinetuneSummary summary;
  MemoryPrediction p = predict_memory([&] { summary = finetune(m); });
  p.parameters = summary.run.parameters;
  return p;
}

}  // namespace mixtrain
