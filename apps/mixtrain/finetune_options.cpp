// Flags of the commands that fine-tune an encoder classifier.
#include "finetune_options.h"

namespace mixtrain::cli {

namespace {
// --pooling's value (both ways a fine-tune's options are made go through here).
Pooling parse_pooling(const std::string& flag) {
  if (flag == "cls") return Pooling::cls;
  if (flag == "mean") return Pooling::mean;
  throw ArgumentError("--pooling must be cls or mean, got '" + flag + "'");
}
}  // namespace

void add_finetune_data_flags(CLI::App* sub, FinetuneFlags& f, bool with_model_and_task) {
  FinetuneOptions& o = f.opt;
  if (with_model_and_task) {
    sub->add_option("--model", o.model_dir,
                    "Encoder directory: config.json, model.safetensors, vocab.txt (default: the built-in "
                    "all-MiniLM-L6-v2)");
    sub->add_option("--task", o.task, "Built-in data set: finefoods (the default) or fortunes (topics)");
  }
  sub->add_option("--train", o.train_path,
                  "Training file: .tsv, .csv or .jsonl with a header / named fields");
  sub->add_option("--test", o.test_path, "Test file, same columns as --train");
  sub->add_option("--text-column", o.columns.text, "Column of the text")->capture_default_str();
  sub->add_option("--text-pair-column", f.text_pair_column, "Column of a second text (sentence pairs)");
  sub->add_option("--label-column", o.columns.label, "Column of the label")->capture_default_str();
  sub->add_option("--train-examples", o.train_examples,
                  "Use only the first N training examples, in file order (0: all)")
      ->capture_default_str();
  sub->add_option("--test-examples", o.test_examples, "Use only the first N test examples (0: all)")
      ->capture_default_str();
  sub->add_option("--max-len", o.max_len, "Tokens per sequence with [CLS]/[SEP] (longer texts are cut)")
      ->capture_default_str();
  sub->add_option("--epochs", o.epochs, "Passes over the training set")->capture_default_str();
  sub->add_option("--pooling", f.pooling, "Head input: cls (BERT's pooler on [CLS]) or mean (masked mean)")
      ->capture_default_str();
  sub->add_option("--dropout", o.dropout, "Dropout of the encoder and the head while training")
      ->capture_default_str();
}

void add_finetune_train_flags(CLI::App* sub, FinetuneFlags& f, bool with_precision, bool with_checkpoints) {
  static_cast<RunOptions&>(f.train.opt) = FinetuneOptions::defaults();  // the defaults the flags show
  add_run_flags(sub, f.train, with_precision,
                RunLengthHelp{"Stop after N optimizer steps (default: run every epoch)",
                              "Test batches per evaluation (0: the whole test set)"});
  if (with_checkpoints) add_checkpoint_flags(sub, f.train, /*with_init_from=*/false);
}

void finetune_from_compare_flags(FinetuneFlags& f, const TrainFlags& given, const std::string& task) {
  const RunOptions d = FinetuneOptions::defaults();
  RunOptions t = given.opt;
  if (!given.given("--lr")) t.lr = d.lr;
  if (!given.given("--weight-decay")) t.weight_decay = d.weight_decay;
  if (!given.given("--beta2")) t.beta2 = d.beta2;
  if (!given.given("--steps")) t.steps = d.steps;
  if (!given.given("--eval-batches")) t.eval_batches = d.eval_batches;
  if (!given.given("--batch-size")) t.batch_size = d.batch_size;
  if (!given.given("--warmup")) t.warmup = d.warmup;
  for (const char* gpt_only :
       {"--data", "--seq-len", "--min-lr-ratio", "--max-data-bytes", "--tokenizer", "--token-file"})
    if (given.given(gpt_only))
      throw ArgumentError(std::string(gpt_only) + " does not apply to --task " + task);
  f.opt.model_dir = given.given("--model") ? given.opt.model : "";
  f.opt.task = task == "classify" ? "" : task;
  if (f.opt.task.empty() && f.opt.train_path.empty()) f.opt.task = "finefoods";
  if (!f.opt.train_path.empty() && task != "classify")
    throw ArgumentError("--train / --test go with --task classify, not " + task);
  f.opt.pooling = parse_pooling(f.pooling);
  f.opt.columns.text_pair = f.text_pair_column;
  f.opt.train = t;
}

void add_task_flags(CLI::App* sub, TaskFlags& t) {
  t.app = sub;
  sub->add_option(
         "--task", t.task,
         "lm (train a GPT), or fine-tune an encoder classifier: classify (Fine Foods, or --train/--test), "
         "finefoods, fortunes")
      ->capture_default_str()
      ->check(CLI::IsMember({"lm", "classify", "finefoods", "fortunes"}));
  add_finetune_data_flags(sub, t.finetune, /*with_model_and_task=*/false);
}

void TaskFlags::refuse_finetune_flags() const {
  for (const char* flag :
       {"--train", "--test", "--epochs", "--max-len", "--pooling", "--train-examples", "--test-examples",
        "--text-column", "--text-pair-column", "--label-column", "--dropout"})
    if (app->count(flag) > 0) throw ArgumentError(std::string(flag) + " applies to --task classify, not lm");
}

std::optional<FinetuneOptions> TaskFlags::short_finetune(const TrainFlags& given) {
  if (lm()) {
    refuse_finetune_flags();
    return std::nullopt;
  }
  FinetuneOptions o = finetune_options(given);
  o.train.steps = given.opt.steps;
  o.train.eval_batches = given.opt.eval_batches;
  return o;
}

FinetuneOptions TaskFlags::finetune_options(const TrainFlags& given) {
  finetune_from_compare_flags(finetune, given, task);
  return finetune.opt;
}

void FinetuneFlags::finish(const std::vector<PrecisionMode>& precisions) {
  for (const char* flag : {"--train", "--test", "--save"})
    if (train.given(flag) && train.app->get_option(flag)->as<std::string>().empty())
      throw ArgumentError(std::string(flag) + ": empty path");
  if (train.given("--model") && opt.model_dir.empty()) throw ArgumentError("--model: empty path");
  // --steps 0, the old spelling of "every epoch", is that still.
  if (train.given("--steps") && train.opt.steps == 0) train.opt.steps.reset();
  if (train.opt.steps && *train.opt.steps < 0)
    throw ArgumentError("--steps must be >= 0 (0: every epoch), got " + std::to_string(*train.opt.steps));
  train.finish(precisions);
  opt.pooling = parse_pooling(pooling);
  opt.columns.text_pair = text_pair_column;
  opt.train = train.opt;
}

}  // namespace mixtrain::cli
