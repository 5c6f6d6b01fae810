// `mixtrain finetune`: fine-tunes a pretrained encoder on labelled text (train/finetune.h);
// `mixtrain classify`: applies a saved fine-tuned model to texts (train/classify.h).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "finetune_options.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/train/classify.h"
#include "mixtrain/train/numerics_advice.h"
#include "mixtrain/train/results_json.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::cli {
namespace {

// The run summary (summary_json_text: speed, peak memory by category, ...) with the fine-tune's
// results: test accuracy, the majority baseline, the time in training steps, each epoch.
nlohmann::ordered_json finetune_json(const FinetuneSummary& s, const FinetuneOptions& o) {
  nlohmann::ordered_json j;
  j["test_accuracy"] = finite_or_null(s.test_accuracy());
  j["test_loss"] = finite_or_null(s.run.val_loss);
  j["majority_baseline"] = s.majority_baseline;
  j["train_seconds"] = s.train_seconds;
  j["train_examples"] = s.train_examples;
  j["test_examples"] = s.test_examples;
  j["steps_per_epoch"] = s.steps_per_epoch;
  j["max_len"] = o.max_len;
  j["batch_size"] = o.train.batch_size;
  j["lr"] = o.train.lr;
  j["labels"] = s.labels;
  j["epochs"] = nlohmann::ordered_json::array();
  for (const FinetuneEpoch& e : s.epochs)
    j["epochs"].push_back({{"epoch", e.epoch},
                           {"step", e.step},
                           {"train_loss", finite_or_null(e.train_loss)},
                           {"test_loss", finite_or_null(e.test_loss)},
                           {"test_accuracy", finite_or_null(e.test_accuracy)},
                           {"elapsed_s", e.elapsed_s}});
  const nlohmann::ordered_json run = json_of(summary_json_text(s.run));  // named: items() must not outlive it
  for (const auto& [k, v] : run.items()) j[k] = v;
  return j;
}

int run_finetune(FinetuneFlags& f, const std::string& json_path, const CLI::App& sub) {
  // Checked with the run's inputs (the data, the model directory's files) and outputs before it loads.
  add_json_output(f.opt.train, json_path);
  if (json_path == "-") f.opt.train.quiet = true;
  install_stop_handlers();
  make_interruptible(f.opt.train);
  f.opt.train.world = &join_world("finetune");        // MPI's ranks under mpirun, else this process
  const bool rank0 = f.opt.train.world->rank() == 0;  // the only one that reports
  FinetuneSummary s;
  int code = 0;
  try {
    s = finetune(f.opt);
  } catch (const FinetuneDivergedError& e) {
    if (!rank0) return kExitDiverged;
    s = e.finetune;  // what was known: data sizes, labels, baseline, the epochs before
    std::fprintf(stderr, "mixtrain: error: %s\n", error_message(e, sub).c_str());
    code = kExitDiverged;
  }
  if (!rank0) return s.run.interrupted ? 128 + s.run.stop_signal : s.run.diverged ? kExitDiverged : 0;
  if (code == 0 && s.run.diverged) code = report_divergence(s.run);
  if (s.run.interrupted) {
    std::fprintf(stderr, "mixtrain: interrupted at step %lld by %s%s%s\n",
                 static_cast<long long>(s.run.steps), s.run.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                 s.run.checkpoint_path.empty() ? "" : "; checkpoint ", s.run.checkpoint_path.c_str());
    code = 128 + s.run.stop_signal;
  }
  if (!json_path.empty()) write_file_atomic(json_path, finetune_json(s, f.opt).dump(2) + "\n");
  if (code == 0 && !f.opt.train.quiet)
    std::printf(
        "done (%s): %lld steps, test accuracy %.2f%% (majority baseline %.2f%%), test loss %.4f, %.1f s in "
        "training steps, %.0f tokens/s (not counting padding), %.1f GFLOP/s model, MFU %.1f%%\n",
        s.run.precision.c_str(), static_cast<long long>(s.run.steps), 100 * s.test_accuracy(),
        100 * s.majority_baseline, s.run.val_loss, s.train_seconds, s.run.tokens_per_s,
        s.run.model_flops_per_s / 1e9, 100 * s.run.mfu);
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw IoError("cannot write to stdout: " + std::string(std::strerror(errno)));
  return code;
}

// The texts of --file: one a line (empty lines skipped); "-" is stdin.
// One text to classify and where it came from, for a message about it ("--file F:12", "--text 2").
struct Input {
  std::string text;
  std::string where;
};

void print_predictions(const TextClassifier& c, const std::vector<Input>& batch,
                       std::optional<int64_t> max_len, bool as_json) {
  std::vector<std::string> texts;
  for (const Input& in : batch) texts.push_back(in.text);
  std::vector<Prediction> preds;
  try {
    preds = c.classify(texts, max_len);
  } catch (const ArgumentError&) {
    for (const Input& in : batch) try {  // which one: the batch's texts alone
        c.classify({in.text}, max_len);
      } catch (const ArgumentError& e) {
        throw ArgumentError(e.fields(), in.where + ": " + e.what());
      }
    throw;
  }
  for (const Prediction& p : preds) {
    if (as_json) {
      nlohmann::ordered_json j;
      j["label"] = p.label;
      for (size_t k = 0; k < p.probabilities.size(); ++k)
        j["probabilities"][c.labels()[k]] = p.probabilities[k];
      std::printf("%s\n", j.dump().c_str());
      continue;
    }
    // The labels hold no tab, newline or other control character (TextClassifier::load).
    std::printf("%s", p.label.c_str());
    for (size_t k = 0; k < p.probabilities.size(); ++k)
      std::printf("\t%s=%.4f", c.labels()[k].c_str(), p.probabilities[k]);
    std::printf("\n");
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw IoError("cannot write to stdout: " + std::string(std::strerror(errno)));
}

// Classifies --text's texts, or --file's lines (blank ones skipped; "-": stdin) as they are read,
// in batches printed as each is done: a long file or a pipe shows results at once, in bounded
// memory.
void classify_inputs(const TextClassifier& c, const std::vector<std::string>& texts, const std::string& path,
                     std::optional<int64_t> max_len, bool as_json) {
  constexpr size_t kBatch = 16;
  if (max_len && *max_len > c.max_positions())  // before any input is read
    throw ArgumentError({"max_len"}, "max_len " + std::to_string(*max_len) + " exceeds the model's " +
                                         std::to_string(c.max_positions()) + " positions");
  std::vector<Input> batch;
  const auto add = [&](Input in) {
    batch.push_back(std::move(in));
    if (batch.size() == kBatch) {
      print_predictions(c, batch, max_len, as_json);
      batch.clear();
    }
  };
  if (path.empty()) {
    for (size_t i = 0; i < texts.size(); ++i) add({texts[i], "--text " + std::to_string(i + 1)});
  } else {
    std::ifstream file;
    if (path != "-") {
      file.open(path);
      if (!file) throw IoError("--file " + path + ": cannot be read (" + std::strerror(errno) + ")");
    }
    std::istream& in = path == "-" ? std::cin : file;
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) add({line, "--file " + path + ":" + std::to_string(number)});
    }
    if (in.bad()) throw IoError("--file " + path + ": read error");
  }
  if (!batch.empty()) print_predictions(c, batch, max_len, as_json);
}

}  // namespace

void register_finetune(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("finetune", "Fine-tune a pretrained encoder (BERT) to classify text");
  auto f = std::make_shared<FinetuneFlags>();
  auto json = std::make_shared<std::string>();
  add_finetune_train_flags(sub, *f, /*with_precision=*/true,
                           /*with_checkpoints=*/true);  // first: drops train's --model
  add_finetune_data_flags(sub, *f);
  add_data_parallel_flags(sub, f->train);
  sub->add_option("--save", f->opt.save_dir, "Write the fine-tuned model to DIR (Hugging Face's layout)");
  add_json_option(sub, *json, "The run summary (on stdout: the progress goes quiet)");
  sub->add_option("--profile", f->opt.train.profile_warmup,
                  "Time each kind of work (GEMM, attention, casts, ...) over the steps after the first N; "
                  "--json gets breakdown_s_per_step")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  auto predict = std::make_shared<bool>(false);
  sub->add_flag(
      "--predict-memory", *predict,
      "Only predict the run's peak memory by category (its first two steps on the meta device), as JSON");
  auto advise = std::make_shared<bool>(false);
  sub->add_flag(
      "--advise", *advise,
      "Only run a few steps (--steps, default 3) in 32-true with numerics probes and say which precision "
      "modes are safe (the advice of `numerics --advise`; --json FILE writes it as JSON)");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, json, predict, advise, sub] {
         apply_global_options(g);
         *json = json_output(*sub, *json);
         f->finish();
         f->opt.train.profile = sub->count("--profile") > 0;
         if (*advise && *predict) throw ArgumentError("--advise and --predict-memory: one at a time");
         if (*predict) {
           const MemoryPrediction p = predict_finetune_memory(f->opt);
           nlohmann::ordered_json j;
           j["parameters"] = p.parameters;
           j["peak_bytes"] = p.peak_bytes;
           j["peak_bytes_by_category"] = json_of(peaks_json_text(p.peak_by_category));
           j["peak_moment"] = p.peak_moment;
           // each category's own peak (above) may fall at another moment (loading
           // the weights); what makes up peak_bytes:
           j["at_peak_by_category"] = json_of(peaks_json_text(p.at_peak));
           j["terms"] = json_of(memory_terms_json_text(p.terms));
           std::printf("%s\n", j.dump(2).c_str());
           return 0;
         }
         if (*advise) {
           if (sub->count("--steps") == 0) f->opt.train.steps = 3;
           f->opt.train.quiet = true;
           if (sub->count("--precision") > 0)
             std::fprintf(stderr,
                          "mixtrain: warning: --precision has no effect with --advise (it runs 32-true)\n");
           if (!json->empty() && *json != "-") check_output_path(*json, "--json");
           add_json_output(f->opt.train, *json);  // and against the trial's inputs
           print_numerics_advice(advise_finetune_numerics(f->opt), *json);
           return 0;
         }
         if (*json == "-" && f->opt.train.log_jsonl == "-")
           throw ArgumentError("--json - and --log-jsonl - both write to stdout");
         return run_finetune(*f, *json, *sub);
       }});

  auto* cls = app.add_subcommand("classify", "Classify texts with a model saved by finetune --save");
  auto dir = std::make_shared<std::string>();
  auto texts = std::make_shared<std::vector<std::string>>();
  auto file = std::make_shared<std::string>();
  auto max_len = std::make_shared<std::optional<int64_t>>();
  auto as_json = std::make_shared<bool>(false);
  auto dtype = std::make_shared<std::string>();
  cls->add_option("--checkpoint", *dir,
                  "The model directory (finetune --save DIR, or mixtrain quantize --output)")
      ->required();
  cls->add_option("--dtype", *dtype,
                  "f32 or bf16 inference (default: bf16 for a quantized model, f32 otherwise)");
  cls->add_option("--text", *texts, "A text to classify (repeatable)");
  cls->add_option("--file", *file, "Classify each line of FILE (-: stdin)");
  cls->add_option("--max-len", *max_len, "Tokens per text with [CLS]/[SEP] (default: the model's positions)");
  cls->add_flag("--json", *as_json, "One JSON object per text instead of text lines");
  commands.push_back({[cls] { return cls->parsed(); },
                      [&g, dir, texts, file, max_len, as_json, dtype] {
                        apply_global_options(g);
                        if (texts->empty() == file->empty())
                          throw ArgumentError("classify needs --text or --file (one of them)");
                        std::optional<DType> dt;
                        if (!dtype->empty()) dt = parse_dtype(*dtype);
                        const TextClassifier c = TextClassifier::load(*dir, dt);
                        classify_inputs(c, *texts, *file, *max_len, *as_json);
                        return 0;
                      }});
}

}  // namespace mixtrain::cli
