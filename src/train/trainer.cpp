// `mixtrain train`: the run assembled from its options (the loop is train/training_run.cpp).
#include "mixtrain/train/trainer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/data/bpe_tokenizer.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/data/text_corpus.h"
#include "mixtrain/data/token_file.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/train/output_paths.h"
#include "mixtrain/train/recipe.h"
#include "train/checkpointing.h"
#include "train/model_config.h"

namespace mixtrain {

OptimizerConfig RunOptions::optimizer_config() const {
  OptimizerConfig oc;
  oc.kind = optimizer;
  oc.lr = lr;
  oc.beta1 = beta1;
  oc.beta2 = beta2;
  oc.eps = eps;
  oc.momentum = momentum;
  oc.weight_decay = weight_decay;
  oc.rounding = update_rounding;
  oc.state = optim_state;
  oc.seed = seed;
  return oc;
}

int64_t RunOptions::max_bad_steps_or_default() const {
  // Nothing can recover an fp32 NaN: 32-true stops at the first by default.
  return max_bad_steps ? *max_bad_steps : (precision == PrecisionMode::true32 ? 1 : 20);
}

void RunOptions::validate() const {
  // Messages name the fields as spelled here; the CLI says its flags instead (Error::fields()).
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) bad(field, " must be positive, got " + std::to_string(v));
  };
  if (steps) positive(*steps, "steps");
  positive(batch_size, "batch_size");
  if (!numerics.path.empty()) numerics.validate();
  for (const std::string& p : keep_fp32)
    if (p.empty()) bad("keep_fp32", " has an empty pattern");
  if (batch_size > (int64_t{1} << 20))
    bad("batch_size", " must be at most 2^20 (1048576), got " + std::to_string(batch_size));
  if (!(lr > 0.f) || !std::isfinite(lr)) bad("lr", " must be a positive number");
  if (warmup < 0 || (steps && warmup > *steps))
    throw ArgumentError({"warmup", "steps"}, "warmup must be in [0, steps]");
  if (!(weight_decay >= 0.f)) bad("weight_decay", " must be >= 0");
  if (!(grad_clip >= 0.f)) bad("grad_clip", " must be >= 0 (0 disables clipping)");
  if (eval_every < 0) bad("eval_every", " must be >= 0");
  positive(log_every, "log_every");
  positive(grad_accum, "grad_accum");
  for (int64_t s : inject_nonfinite)
    if (s < 1) bad("inject_nonfinite", " steps count from 1, got " + std::to_string(s));
  if (max_bad_steps) positive(*max_bad_steps, "max_bad_steps");
  if (inject_nonfinite_rank && *inject_nonfinite_rank < 0)
    bad("inject_nonfinite_rank", " must be a rank >= 0, got " + std::to_string(*inject_nonfinite_rank));
  if (data_parallel.zero_stage < 0 || data_parallel.zero_stage > 3)
    bad("zero",
        " must be 0, 1 (ZeRO stage 1: optimizer state sharded over the ranks), 2 (gradients too) or 3 "
        "(parameters too), got " +
            std::to_string(data_parallel.zero_stage));
  if (memory_limit && *memory_limit <= 0)
    bad("memory_limit", " must be a positive number of bytes, got " + std::to_string(*memory_limit));
  if (optim_state != StatePrecision::fp32 && precision_spec(precision).param_dtype != DType::f32 &&
      update_rounding != UpdateRounding::master)
    throw ArgumentError(
        {"optim_state", "precision"},
        "optim_state " + std::string(state_precision_name(optim_state)) + " needs fp32 weights (" +
            "32-true or a *-mixed mode) or update_rounding master; precision " +
            std::string(precision_spec(precision).name) + " keeps the optimizer state in the weights' dtype");
  if (!(beta1 >= 0.f && beta1 < 1.f)) bad("beta1", " must be in [0, 1)");
  if (!(beta2 >= 0.f && beta2 < 1.f)) bad("beta2", " must be in [0, 1)");
  if (!(eps > 0.f)) bad("eps", " must be positive");
  if (!(momentum >= 0.f) || !std::isfinite(momentum)) bad("momentum", " must be >= 0");
}

void TrainOptions::validate() const {
  auto bad = [](const char* field, const std::string& what) { throw ArgumentError({field}, field + what); };
  if (!steps) bad("steps", " must be given for language-model pre-training");
  RunOptions::validate();
  if (eval_batches <= 0) bad("eval_batches", " must be positive, got " + std::to_string(eval_batches));
  if (seq_len && *seq_len <= 0) bad("seq_len", " must be positive, got " + std::to_string(*seq_len));
  if (max_data_bytes && *max_data_bytes <= 0)
    bad("max_data_bytes", " must be a byte count >= 1, got " + std::to_string(*max_data_bytes));
  if (!(min_lr_ratio >= 0.f && min_lr_ratio <= 1.f)) bad("min_lr_ratio", " must be in [0, 1]");
}

namespace {

// The data: a regular file of at most max_bytes (4 GiB when unset), or, with an explicit max_bytes, a
// stream ("-": stdin, a FIFO, a device) read up to it. IoError naming the file and the limit.
TextCorpus load_data(const std::string& path, std::optional<int64_t> max_bytes) {
  constexpr int64_t kDefaultMax = int64_t{4} << 30;
  const int64_t limit = max_bytes.value_or(kDefaultMax);
  auto over = [&](const std::string& size) {
    return IoError({"max_data_bytes"}, "data file " + path + " is " + size + ", over the " +
                                           (max_bytes ? "max_data_bytes limit of " + std::to_string(limit)
                                                      : "default limit of " + std::to_string(limit) +
                                                            " (raise it with max_data_bytes)"));
  };
  struct stat st {};
  const bool stdin_data = path == "-";
  if (!stdin_data && (::stat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
    if (S_ISREG(st.st_mode) && st.st_size > limit) throw over(std::to_string(st.st_size) + " bytes");
    return TextCorpus::load(path);  // names a missing file or a directory itself
  }
  if (!max_bytes)
    throw IoError({"max_data_bytes"},
                  "data " + path +
                      " is not a regular file (a stream may never end): give max_data_bytes to read "
                      "it up to that size");
  const int fd = stdin_data ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("data file " + path + ": cannot be read (" + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 16);
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const std::string why = std::strerror(errno);
      if (!stdin_data) ::close(fd);
      throw IoError("data file " + path + ": read error (" + why + ")");
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
    if (static_cast<int64_t>(bytes.size()) > limit) {
      if (!stdin_data) ::close(fd);
      throw over("more than " + std::to_string(limit) + " bytes");
    }
  }
  if (!stdin_data) ::close(fd);
  return TextCorpus::from_bytes(std::move(bytes), path);
}

// The token corpus of a run with a tokenizer: the token file reused (when this tokenizer made it
// from this data) or written, then mapped; `tokenizer_files` gets the tokenizer's files (what its
// checkpoints carry).
TextCorpus load_token_data(const LmOptions& lm, std::vector<CheckpointFile>& tokenizer_files) {
  const std::string path = lm.data.empty() ? TextCorpus::default_corpus_path() : lm.data;
  if (path == "-")
    throw ArgumentError({"data", "tokenizer"},
                        "data from stdin cannot be tokenized into a token file: give a file");
  const BpeTokenizer tok = BpeTokenizer::from_dir(lm.tokenizer);
  for (auto& [name, t] : tok.files())
    tokenizer_files.push_back({name, std::vector<uint8_t>(t.begin(), t.end())});
  const TextCorpus text = load_data(path, lm.max_data_bytes);
  const std::string_view bytes(reinterpret_cast<const char*>(text.storage()), size_t(text.storage_bytes()));
  const std::string file = lm.token_file.empty() ? path + "." + tok.fingerprint() + ".tokens" : lm.token_file;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) {
    write_token_file(file, tok, bytes, path);
  } else {
    const TokenFileInfo info = read_token_file_info(file);
    if (info.tokenizer != tok.fingerprint())
      throw IoError({"token_file"}, "token file '" + file + "' was made by another tokenizer (fingerprint " +
                                        info.tokenizer + ", " + lm.tokenizer + " has " + tok.fingerprint() +
                                        "): give another token_file or delete it");
    if (info.source_bytes != int64_t(bytes.size()) || info.source_crc32 != text_crc32(bytes))
      throw IoError({"token_file"}, "token file '" + file + "' is stale: it was made from other data than " +
                                        path + " (" + std::to_string(info.source_bytes) + " bytes, CRC-32 " +
                                        std::to_string(info.source_crc32) +
                                        "): delete it to encode the data again");
  }
  return TextCorpus::from_token_file(file);
}

}  // namespace

namespace {

// Language-model pre-training: a GPT (a preset or a JSON config) on a byte-level text corpus
// (random training windows, fixed validation windows), warm-up + cosine schedule.
class LmRecipe final : public Recipe {
 public:
  explicit LmRecipe(LmOptions lm) : lm_(std::move(lm)) {}
  std::vector<RecipePath> inputs(const RunOptions&) const override {
    std::vector<RecipePath> in;
    for (const RunPaths::Entry& e : lm_input_paths(lm_)) in.push_back({e.what, e.path});
    return in;
  }
  void prepare(const RunOptions& opt, int) override {
    if (!lm_.model.empty()) {
      cfg_ = load_model_config(lm_.model);
    } else if (!opt.checkpoint.init_from.empty()) {  // the configuration of the weights it starts from
      cfg_ = gpt_config_of(opt.checkpoint.init_from, nullptr);
    } else {
      throw ArgumentError({"model"},
                          "model: none given (a preset, a JSON config, or checkpoint.init_from to take "
                          "the configuration of its weights)");
    }
    T_ = lm_.seq_len.value_or(cfg_.block_size);
    if (T_ > cfg_.block_size)
      throw ArgumentError({"seq_len"}, "seq_len " + std::to_string(T_) + " exceeds the model's block_size " +
                                           std::to_string(cfg_.block_size));
    if (lm_.tokenizer.empty()) {
      corpus_ = std::make_unique<TextCorpus>(
          load_data(lm_.data.empty() ? TextCorpus::default_corpus_path() : lm_.data, lm_.max_data_bytes));
    } else {
      corpus_ = std::make_unique<TextCorpus>(load_token_data(lm_, tokenizer_files_));
      // A byte-level config (256) takes the tokenizer's vocabulary; a larger one stays (padding).
      if (cfg_.vocab_size == TextCorpus::kVocabSize) cfg_.vocab_size = corpus_->vocab_size();
    }
    data_ = std::make_unique<LmWindows>(*corpus_, opt.batch_size, T_, opt.seed);
    if (cfg_.vocab_size < corpus_->vocab_size())
      throw ArgumentError("model vocab_size " + std::to_string(cfg_.vocab_size) + " is smaller than the " +
                          std::to_string(corpus_->vocab_size()) +
                          (lm_.tokenizer.empty() ? " byte tokens" : " tokens of the tokenizer"));
  }
  std::vector<AgreedField> agreement(const RunOptions&) const override {
    const auto i = [](int64_t v) { return std::to_string(v); };
    return {{"seq_len", i(T_)},
            {"min_lr_ratio", agreed_number(lm_.min_lr_ratio)},
            {"model", i(cfg_.vocab_size) + " " + i(cfg_.block_size) + " " + i(cfg_.n_layer) + " " +
                          i(cfg_.n_head) + " " + i(cfg_.n_embd) + " " + agreed_number(cfg_.dropout) + " " +
                          agreed_number(cfg_.ln_eps)},
            {"data", fingerprint(corpus_->storage(), size_t(corpus_->storage_bytes()))}};
  }
  const DataSource& data() const override { return *data_; }
  std::unique_ptr<Model> make_model(const PrecisionSpec& spec, MemCategory weights,
                                    const RunOptions& opt) override {
    return std::make_unique<Gpt>(cfg_, opt.seed, spec.param_dtype, spec.grad_dtype, weights);
  }
  void configure(RunConfig& rc, const RunOptions& opt) const override {
    rc.steps = *opt.steps;  // TrainOptions::validate: given
    rc.schedule.max_lr = opt.lr;
    rc.schedule.warmup_steps = opt.warmup;
    rc.schedule.total_steps = *opt.steps;
    rc.schedule.min_lr = opt.lr * lm_.min_lr_ratio;
  }
  std::unique_ptr<TrainingHook> checkpointing(const RunOptions& one_process, Model& model) override {
    return std::make_unique<TrainCheckpointing>(TrainOptions(one_process, lm_), static_cast<Gpt&>(model), T_,
                                                *corpus_, tokenizer_files_);
  }

 private:
  LmOptions lm_;
  std::vector<CheckpointFile> tokenizer_files_;  // a tokenizer run's vocab.json, merges.txt
  GptConfig cfg_;
  int64_t T_ = 0;
  std::unique_ptr<TextCorpus> corpus_;
  std::unique_ptr<LmWindows> data_;
};

}  // namespace

TrainSummary train(const TrainOptions& opt) {
  opt.validate();
  LmRecipe recipe(opt);
  return run_recipe(recipe, opt);
}

std::function<TrainSummary(const RunOptions&)> train_with(LmOptions lm) {
  return [lm = std::move(lm)](const RunOptions& run) { return train(TrainOptions(run, lm)); };
}

MemoryPrediction predict_train_memory(const TrainOptions& o) {
  const TrainOptions m(measured_run_options(o), o);
  TrainSummary summary;
  MemoryPrediction p = predict_memory([&] { summary = train(m); });
  p.parameters = summary.parameters;
  return p;
}

}  // namespace mixtrain
