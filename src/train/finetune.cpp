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
#include "core/file_io.h"
#include "mixtrain/data/builtin_data.h"
#include "mixtrain/data/classification_batches.h"
#include "mixtrain/data/wordpiece.h"
#include "mixtrain/train/classify.h"
#include "mixtrain/train/recipe.h"
#include "mixtrain/train/trainer.h"
#include "train/finetune_checkpointing.h"

namespace mixtrain {
namespace fs = std::filesystem;

RunOptions FinetuneOptions::defaults() {
  RunOptions t;
  t.lr = 5e-5f;
  t.weight_decay = 0.01f;
  t.beta1 = 0.9f;
  t.beta2 = 0.999f;
  t.eps = 1e-8f;
  t.grad_clip = 1.0f;
  t.batch_size = 16;
  t.warmup = 0;
  t.steps.reset();     // every epoch
  t.eval_batches = 0;  // the whole test set
  return t;
}

void FinetuneOptions::validate() const {
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  if (max_len < 2) bad("max_len", " must be at least 2, got " + std::to_string(max_len));
  if (epochs < 1) bad("epochs", " must be positive, got " + std::to_string(epochs));
  if (train_examples < 0)
    bad("train_examples", " must be >= 0 (0: all), got " + std::to_string(train_examples));
  if (test_examples < 0) bad("test_examples", " must be >= 0 (0: all), got " + std::to_string(test_examples));
  if (!(dropout >= 0.f && dropout < 1.f)) bad("dropout", " must be in [0, 1)");
  if (!task.empty() && task != "finefoods" && task != "fortunes")
    bad("task", " must be finefoods or fortunes, got '" + task + "'");
  if (!task.empty() && (!train_path.empty() || !test_path.empty()))
    throw ArgumentError({"task", "train_path"}, "task and train_path / test_path exclude each other");
  if (train_path.empty() != test_path.empty())
    throw ArgumentError({"train_path", "test_path"}, "train_path and test_path go together");
  if (train.eval_batches < 0) bad("eval_batches", " must be >= 0 (0: the whole test set)");
  if (!save_dir.empty()) {
    // The save never replaces the pretrained model, nor silently an earlier save.
    std::error_code ec;
    const std::string model = model_dir.empty() ? builtin_data_path(kDefaultEncoderModel) : model_dir;
    if (fs::exists(save_dir, ec) && fs::equivalent(save_dir, model, ec))
      throw ArgumentError({"save_dir", "model_dir"}, "save_dir " + save_dir + " is the model_dir " + model +
                                                         ": saving would replace the pretrained model");
    if (fs::is_directory(save_dir, ec) && !fs::is_empty(save_dir, ec) && !train.overwrite)
      throw ArgumentError({"save_dir", "overwrite"},
                          "save_dir " + save_dir +
                              " exists and is not empty (an earlier save?): choose "
                              "another directory, or overwrite to replace it");
  }
  if (!train.checkpoint.init_from.empty())
    throw ArgumentError({"checkpoint.init_from"},
                        "checkpoint.init_from does not apply to a fine-tune (model_dir is the start)");
  RunOptions t = train;  // the shared checks, without the warm-up's bound by steps (checked below)
  t.warmup = 0;
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
    // Before the test set, which is read with the training set's labels: a training file without
    // examples is what is wrong, not the test file's first label.
    if (t.train.examples.empty())
      throw ArgumentError("training set " + t.train.path + " holds no examples (a header alone?)");
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
  EpochHook(FinetuneSummary& out, EpochSums& sums, int64_t steps_per_epoch, int64_t epochs, bool quiet)
      : out_(out), sums_(sums), per_epoch_(steps_per_epoch), epochs_(epochs), quiet_(quiet) {}
  void on_step_end(TrainingRun& run, const StepRecord& r) override {
    sums_.loss_sum += r.loss;
    ++sums_.steps;
    out_.train_seconds += r.seconds;
    const bool end = r.step % per_epoch_ == 0 || r.step == run.config().steps;
    if (!r.evaluated || !end) return;
    FinetuneEpoch e;
    e.epoch = (r.step + per_epoch_ - 1) / per_epoch_;
    e.step = r.step;
    e.train_loss = sums_.loss_sum / double(sums_.steps);
    e.test_loss = r.val_loss;
    e.test_accuracy = r.val_accuracy;
    e.elapsed_s = r.elapsed_s;
    out_.epochs.push_back(e);
    sums_ = EpochSums{};
    if (quiet_) return;
    char accuracy[32] = "none (non-finite loss)";
    if (std::isfinite(e.test_accuracy))
      std::snprintf(accuracy, sizeof accuracy, "%.2f%%", 100 * e.test_accuracy);
    std::printf(
        "epoch %lld/%lld (step %lld): train loss %.4f, test loss %.4f, test accuracy %s (majority %.2f%%), "
        "%.0f s\n",
        static_cast<long long>(e.epoch), static_cast<long long>(epochs_), static_cast<long long>(e.step),
        e.train_loss, e.test_loss, accuracy, 100 * out_.majority_baseline, e.elapsed_s);
    std::fflush(stdout);
  }

 private:
  FinetuneSummary& out_;
  EpochSums& sums_;  // the recipe's: the checkpoint saves and restores it
  int64_t per_epoch_, epochs_;
  bool quiet_;
};

// Sequence classification: a pretrained encoder with a new head (models/encoder.h) on labelled
// text, tokenized once and dynamically padded (data/classification_batches.h), whole epochs under
// Hugging Face's linear schedule, evaluated on the whole test set after each epoch; the
// fine-tuned model saved at the end (save_dir).
class ClassificationRecipe final : public Recipe {
 public:
  explicit ClassificationRecipe(const FinetuneOptions& o) : o_(o), dir_(model_dir_of(o)) {}
  FinetuneSummary& summary() { return out_; }

  std::vector<RecipePath> inputs(const RunOptions&) const override {
    std::vector<RecipePath> p{{"model_dir", dir_}};
    // Each file of the model directory (config.json, model.safetensors, vocab.txt, ...): no output
    // may replace one.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (e.is_regular_file(ec)) p.push_back({"model_dir", e.path().string()});
    if (!o_.train_path.empty()) p.push_back({"train_path", o_.train_path});
    if (!o_.test_path.empty()) p.push_back({"test_path", o_.test_path});
    return p;
  }
  std::vector<RecipePath> output_dirs(const RunOptions&) const override {
    if (o_.save_dir.empty()) return {};
    return {{"save_dir", o_.save_dir}};
  }
  void prepare(const RunOptions& t, int ranks) override {
    task_ = load_task(o_);
    tokenizer_ = std::make_unique<WordPieceTokenizer>(tokenizer_from_model_dir(dir_));
    data_ = std::make_unique<ClassificationBatches>(task_.train, task_.test, *tokenizer_, t.batch_size,
                                                    o_.max_len, t.seed);
    out_.labels = task_.train.labels;
    out_.majority_baseline = data_->majority_baseline();
    out_.train_examples = int64_t(task_.train.examples.size());
    out_.test_examples = int64_t(task_.test.examples.size());
    // One optimizer step takes grad_accum batches on each of N ranks; an epoch ends with the step
    // that reads its last.
    const int64_t per_step = t.grad_accum * ranks;
    out_.steps_per_epoch = (data_->batches_per_epoch() + per_step - 1) / per_step;
  }
  std::vector<AgreedField> agreement(const RunOptions&) const override {
    std::string labels;
    for (const std::string& l : task_.train.labels) labels += l + "\n";
    std::string config;
    try {
      const auto bytes = read_file_bounded((fs::path(dir_) / "config.json").string(), 1 << 20, "config");
      config = fingerprint(bytes.data(), bytes.size());
    } catch (const IoError&) {
      config = "unreadable";  // the model's loading says why, on every rank
    }
    return {{"task", task_.name},
            {"model_dir", config},
            {"max_len", std::to_string(o_.max_len)},
            {"epochs", std::to_string(o_.epochs)},
            {"pooling", o_.pooling == Pooling::cls ? "cls" : "mean"},
            {"dropout", agreed_number(o_.dropout)},
            {"labels", labels},
            {"train_path", data_checksum(*data_) + " " + std::to_string(out_.train_examples) + " " +
                               std::to_string(out_.test_examples)}};
  }
  const DataSource& data() const override { return *data_; }
  std::unique_ptr<Model> make_model(const PrecisionSpec& spec, MemCategory weights,
                                    const RunOptions& t) override {
    ClassifierOptions co;
    co.labels = task_.train.labels;
    co.pooling = o_.pooling;
    co.dropout = o_.dropout;
    co.seed = t.seed;
    std::unique_ptr<Model> model =
        load_encoder_classifier(dir_, co, spec.param_dtype, spec.grad_dtype, weights);
    const int64_t positions = encoder_info(*model).max_positions;
    if (o_.max_len > positions)
      throw ArgumentError({"max_len"}, "max_len " + std::to_string(o_.max_len) + " exceeds the model's " +
                                           std::to_string(positions) + " positions (" + dir_ +
                                           "/config.json)");
    return model;
  }
  void configure(RunConfig& rc, const RunOptions& t) const override {
    const int64_t total = out_.steps_per_epoch * o_.epochs;
    rc.steps = t.steps ? std::min(*t.steps, total) : total;
    rc.schedule.kind = ScheduleKind::linear;
    rc.schedule.max_lr = t.lr;
    rc.schedule.warmup_steps = std::min(t.warmup, total);
    rc.schedule.total_steps = total;
    rc.eval_every = t.eval_every > 0 ? t.eval_every : out_.steps_per_epoch;
  }
  std::unique_ptr<TrainingHook> checkpointing(const RunOptions& one_process, Model& model) override {
    nlohmann::json run_options;
    run_options["model"] = nlohmann::json::parse(model.config_json());
    run_options["data"] = {{"task", task_.name},
                           {"train", out_.train_examples},
                           {"test", out_.test_examples},
                           {"tokens_crc32", data_checksum(*data_)}};
    run_options["max_len"] = o_.max_len;
    run_options["epochs"] = o_.epochs;
    run_options["pooling"] = o_.pooling == Pooling::cls ? "cls" : "mean";
    run_options["dropout"] = o_.dropout;
    return std::make_unique<FinetuneCheckpointing>(one_process, std::move(run_options), epoch_);
  }
  void add_hooks(TrainingRun& run, const RunOptions& t) override {
    out_.epochs.clear();  // this run's (a memory prediction runs first)
    out_.train_seconds = 0;
    epoch_ = EpochSums{};  // a resumed run's checkpoint restores the sums of its epoch
    run.add_hook(std::make_unique<EpochHook>(out_, epoch_, out_.steps_per_epoch, o_.epochs, t.quiet));
    if (t.quiet) return;
    std::printf(
        "fine-tuning %s on %s: %lld train / %lld test examples, %zu labels, %lld steps (%lld per epoch), "
        "%s\n",
        dir_.c_str(), task_.name.c_str(), static_cast<long long>(out_.train_examples),
        static_cast<long long>(out_.test_examples), out_.labels.size(),
        static_cast<long long>(run.config().steps), static_cast<long long>(out_.steps_per_epoch),
        std::string(precision_spec(t.precision).name).c_str());
    std::fflush(stdout);
  }
  bool finish_reads_weights(const RunOptions&) const override { return !o_.save_dir.empty(); }
  void finish(Model& model, const TrainSummary&, const RunOptions& t) override {
    if (o_.save_dir.empty()) return;
    save_encoder_classifier(model, o_.save_dir, dir_);
    if (!t.quiet) std::printf("model saved: %s\n", o_.save_dir.c_str());
  }

 private:
  const FinetuneOptions& o_;
  const std::string dir_;
  TextClassificationTask task_;
  std::unique_ptr<WordPieceTokenizer> tokenizer_;
  std::unique_ptr<ClassificationBatches> data_;
  FinetuneSummary out_;
  EpochSums epoch_;
};

}  // namespace

FinetuneSummary finetune(const FinetuneOptions& o) {
  o.validate();
  ClassificationRecipe recipe(o);
  try {
    recipe.summary().run = run_recipe(recipe, o.train);
  } catch (const DivergedError& e) {
    recipe.summary().run = e.summary;
    throw FinetuneDivergedError(e, recipe.summary());
  }
  return recipe.summary();
}

namespace {

// The fine-tune `o` with the shared options `t` (a compare row's, a benchmark's, a measured run's)
// and nothing saved: the run function compare, bench and memory hand the engine.
std::function<TrainSummary(const RunOptions&)> finetune_with(const FinetuneOptions& o) {
  return [&o](const RunOptions& t) {
    FinetuneOptions f = o;
    f.train = t;
    f.save_dir.clear();
    return finetune(f).run;
  };
}

}  // namespace

CompareResult compare_finetune(const FinetuneOptions& base, const std::vector<CompareEntry>& entries,
                               const std::function<void(const CompareRun&)>& on_run,
                               double* majority_baseline) {
  base.validate();
  if (majority_baseline) *majority_baseline = load_task(base).test.majority_baseline();
  return compare_precisions(base.train, entries, on_run, finetune_with(base));
}

MemoryPrediction predict_finetune_memory(const FinetuneOptions& o) {
  FinetuneOptions m = o;
  m.train = measured_run_options(o.train);
  RunOptions& t = m.train;
  t.steps = std::min<int64_t>(t.steps.value_or(2), 2);  // the peak is reached in the first two steps
  t.inject_nonfinite.clear();
  m.save_dir.clear();
  FinetuneSummary summary;
  MemoryPrediction p = predict_memory([&] { summary = finetune(m); });
  p.parameters = summary.run.parameters;
  return p;
}

MemoryReport finetune_memory_report(const FinetuneOptions& o, bool predict_only, int ranks) {
  o.validate();
  return task_memory_report(o.train, predict_only, ranks, finetune_with(o));
}

BenchTrainResult bench_finetune(const FinetuneOptions& o, bool thread_scaling,
                                const std::function<void(const BenchTrainRun&)>& on_run) {
  o.validate();
  if (!o.train.steps)
    throw ArgumentError({"steps"}, "steps must be given (more than profile_warmup) to measure a fine-tune");
  return bench_task(o.train, finetune_with(o), thread_scaling, on_run);
}

}  // namespace mixtrain
