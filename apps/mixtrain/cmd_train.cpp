// `mixtrain train`: trains a GPT on a text file (default: the built-in corpus).
#include <cstdio>

#include "commands.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::cli {

void register_train(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("train", "Train a GPT on a text file (byte-level tokens)");
  auto o = std::make_shared<TrainOptions>();
  auto json = std::make_shared<bool>(false);
  sub->add_option("--model", o->model, "Preset (gpt-nano, gpt-mini, gpt2-small) or a JSON config file")
      ->capture_default_str();
  sub->add_option("--data", o->data, "UTF-8 text file (default: the built-in fortunes corpus)");
  sub->add_option("--steps", o->steps, "Optimizer steps")->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Sequences per step")->capture_default_str();
  sub->add_option("--seq-len", o->seq_len, "Tokens per sequence (default: the model's block size)");
  sub->add_option("--lr", o->lr, "Peak learning rate")->capture_default_str();
  sub->add_option("--min-lr-ratio", o->min_lr_ratio, "Cosine decay floor as a fraction of --lr")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Linear warm-up steps")->capture_default_str();
  sub->add_option("--weight-decay", o->weight_decay, "Decoupled weight decay (matrices only)")->capture_default_str();
  sub->add_option("--beta1", o->beta1, "AdamW beta1")->capture_default_str();
  sub->add_option("--beta2", o->beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--grad-clip", o->grad_clip, "Clip the global gradient norm (0: off)")->capture_default_str();
  sub->add_option("--optimizer", o->optimizer, "adamw or sgd")->capture_default_str();
  sub->add_option("--momentum", o->momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed for weights, batches and dropout")->capture_default_str();
  sub->add_option("--eval-every", o->eval_every, "Validation every K steps (0: only at the end)")->capture_default_str();
  sub->add_option("--eval-batches", o->eval_batches, "Validation batches per evaluation")->capture_default_str();
  sub->add_option("--log-jsonl", o->log_jsonl, "Write one JSON line per step to FILE");
  sub->add_option("--log-every", o->log_every, "Progress line every K steps when not on a terminal")
      ->capture_default_str();
  sub->add_flag("--json", *json, "Print the run summary as JSON on stdout (progress goes quiet)");
  commands.push_back({[sub] { return sub->parsed(); }, [&g, o, json] {
                        apply_global_options(g);
                        if (*json) o->quiet = true;
                        try {
                          const TrainSummary s = train(*o);
                          if (*json) {
                            std::printf("%s\n", s.to_json().dump(2).c_str());
                          } else {
                            std::printf(
                                "done: %lld steps, train loss %.4f, val loss %.4f (unigram baseline %.4f), "
                                "%.0f tokens/s, %.1f GFLOP/s model, MFU %.1f%%\n",
                                static_cast<long long>(s.steps), s.final_train_loss, s.val_loss, s.unigram_baseline,
                                s.tokens_per_s, s.model_flops_per_s / 1e9, 100 * s.mfu);
                          }
                          return 0;
                        } catch (const NonFiniteLossError& e) {
                          std::fprintf(stderr, "mixtrain: error: %s\n", e.what());
                          return kExitNonFiniteLoss;
                        }
                      }});
}

}  // namespace mixtrain::cli
