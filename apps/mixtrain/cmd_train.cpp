// `mixtrain train`: trains a GPT on a text file (default: the built-in corpus) in one precision.
#include <cstdio>

#include "commands.h"
#include "train_options.h"
#include "train/summary_json.h"

namespace mixtrain::cli {

void register_train(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("train", "Train a GPT on a text file (byte-level tokens)");
  auto f = std::make_shared<TrainFlags>();
  auto json = std::make_shared<bool>(false);
  add_train_flags(sub, *f, /*with_precision=*/true);
  add_checkpoint_flags(sub, *f);
  sub->add_flag("--json", *json, "Print the run summary as JSON on stdout (progress goes quiet)");
  commands.push_back({[sub] { return sub->parsed(); }, [&g, f, json, sub] {
                        apply_global_options(g);
                        f->finish();
                        if (*json) f->opt.quiet = true;
                        try {
                          const TrainSummary s = train(f->opt);
                          if (*json) {
                            std::printf("%s\n", summary_to_json(s).dump(2).c_str());
                          } else {
                            std::printf(
                                "done (%s): %lld steps (%lld skipped), train loss %.4f, val loss %.4f (unigram "
                                "baseline %.4f), %.0f tokens/s, %.1f GFLOP/s model, MFU %.1f%%\n",
                                s.precision.c_str(), static_cast<long long>(s.steps),
                                static_cast<long long>(s.skipped_steps), s.final_train_loss, s.val_loss,
                                s.unigram_baseline, s.tokens_per_s, s.model_flops_per_s / 1e9, 100 * s.mfu);
                          }
                          return 0;
                        } catch (const DivergedError& e) {
                          if (*json) std::printf("%s\n", summary_to_json(e.summary).dump(2).c_str());
                          std::fprintf(stderr, "mixtrain: error: %s\n", error_message(e, *sub).c_str());
                          return kExitDiverged;
                        }
                      }});
}

}  // namespace mixtrain::cli
