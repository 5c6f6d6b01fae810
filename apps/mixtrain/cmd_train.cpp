// `mixtrain train`: trains a GPT on a text file (default: the built-in corpus) in one precision.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/train/results_json.h"
#include "mixtrain/train/trainer.h"
#include "train_options.h"

namespace mixtrain::cli {

void register_train(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("train", "Train a GPT on a text file (byte-level tokens)");
  auto f = std::make_shared<TrainFlags>();
  auto json_arg = std::make_shared<std::string>();
  add_train_flags(sub, *f, /*with_precision=*/true);
  add_checkpoint_flags(sub, *f, /*with_init_from=*/true);
  add_data_parallel_flags(sub, *f);
  add_json_option(sub, *json_arg, "The run summary (on stdout: the progress goes quiet)");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, json_arg, sub] {
         apply_global_options(g);
         f->finish();
         const std::string json = json_output(*sub, *json_arg);
         if (json == "-") f->opt.quiet = true;
         if (json == "-" && f->opt.log_jsonl == "-")
           throw ArgumentError("--json and --log-jsonl - both write to stdout");
         add_json_output(f->opt, json);  // checked with the run's inputs and outputs before it trains
         install_stop_handlers();
         make_interruptible(f->opt);
         f->opt.world = &join_world("train");           // MPI's ranks under mpirun, else this process
         const bool rank0 = f->opt.world->rank() == 0;  // the only one that reports
         try {
           const TrainSummary s = train(f->opt);
           if (!rank0) return s.interrupted ? 128 + s.stop_signal : s.diverged ? kExitDiverged : 0;
           if (s.interrupted) {
             // Said on stderr too, so a --json consumer sees why the run is short.
             std::fprintf(stderr, "mixtrain: interrupted at step %lld by %s%s%s\n",
                          static_cast<long long>(s.steps), s.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                          s.checkpoint_path.empty() ? "" : "; checkpoint ", s.checkpoint_path.c_str());
           }
           if (!json.empty()) write_file_atomic(json, json_of(summary_json_text(s)).dump(2) + "\n");
           if (json == "-") {
             // The JSON is all stdout carries.
           } else if (s.diverged) {
             // The one-line error below says it.
           } else if (s.interrupted) {
             std::printf(
                 "interrupted at step %lld (%s): %lld of %lld steps, train loss %.4f, %.0f tokens/s%s%s\n",
                 static_cast<long long>(s.steps), s.precision.c_str(), static_cast<long long>(s.steps),
                 static_cast<long long>(f->opt.steps.value_or(0)), s.final_train_loss, s.tokens_per_s,
                 s.checkpoint_path.empty() ? "" : "; checkpoint ", s.checkpoint_path.c_str());
           } else {
             // With the step log on stdout (--log-jsonl -), the summary line goes to stderr.
             std::fprintf(
                 f->opt.log_jsonl == "-" ? stderr : stdout,
                 "done (%s): %lld steps (%lld skipped), train loss %.4f, val loss %.4f (unigram "
                 "baseline %.4f; %.4f bits per byte), %.0f tokens/s, %.1f GFLOP/s model, MFU %.1f%%\n",
                 s.precision.c_str(), static_cast<long long>(s.steps),
                 static_cast<long long>(s.skipped_steps), s.final_train_loss, s.val_loss, s.unigram_baseline,
                 s.val_bits_per_byte, s.tokens_per_s, s.model_flops_per_s / 1e9, 100 * s.mfu);
           }
           if (std::fflush(stdout) != 0 || std::ferror(stdout))
             throw IoError("cannot write the summary to stdout: " + std::string(std::strerror(errno)));
           if (s.diverged) return report_divergence(s);
           return s.interrupted ? 128 + s.stop_signal : 0;
         } catch (const DivergedError& e) {
           if (!rank0) return kExitDiverged;
           if (!json.empty()) write_file_atomic(json, json_of(summary_json_text(e.summary)).dump(2) + "\n");
           std::fprintf(stderr, "mixtrain: error: %s\n", error_message(e, *sub).c_str());
           return kExitDiverged;
         }
       }});
}

}  // namespace mixtrain::cli
