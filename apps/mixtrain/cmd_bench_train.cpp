// `mixtrain bench train`: prints bench_train (train/bench_train.h), the speed of a training step
// and where its time goes, for each run as it finishes (all threads, then one with
// --thread-scaling), and optionally the results as JSON.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "finetune_options.h"
#include "mixtrain/train/bench_train.h"
#include "mixtrain/train/finetune.h"
#include "mixtrain/train/results_json.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

struct BenchTrainOpts {
  std::string json;
  bool thread_scaling = false;
};

nlohmann::ordered_json to_json(const BenchTrainRun& r) {
  nlohmann::ordered_json j;
  j["precision"] = r.precision;
  j["threads"] = r.threads;
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_flops_per_s"] = r.model_flops_per_s;
  j["gemm_flops_per_s"] = r.gemm_flops_per_s;
  j["mfu"] = r.mfu;
  j["profiled_steps"] = r.profiled_steps;
  j["breakdown"] = json_of(breakdown_json_text(r.breakdown));
  j["system_allocations_per_step"] = r.system_allocations_per_step;
  j["peak_bytes"] = r.peak_bytes;
  const Roofline& rl = r.roofline;
  nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
  for (size_t k = 0; k < kNumWorkKinds; ++k)
    kinds[std::string(work_kind_name(static_cast<WorkKind>(k)))] = {
        {"seconds", r.breakdown.work[k]}, {"bytes", rl.bytes[k]}, {"limit_seconds", rl.limit[k]}};
  j["roofline"] = {{"triad_bytes_per_s", rl.triad_bytes_per_s},
                   {"peak_flops_per_s", rl.peak_flops_per_s},
                   {"peak_basis", rl.peak_basis},
                   {"peak_ghz", rl.peak_ghz},
                   {"gemm_problems", rl.gemm_problems},
                   {"gemm_flops", rl.gemm_flops},
                   {"gemm_own_rate_seconds", rl.gemm_own_rate_s},
                   {"attention_gemm_flops", rl.attention_gemm_flops},
                   {"attention_gemm_own_rate_seconds", rl.attention_gemm_own_rate_s},
                   {"work", kinds},
                   {"step_seconds", r.breakdown.step},
                   {"step_limit_seconds", rl.step_limit},
                   {"step_over_limit", rl.step_limit > 0 ? r.breakdown.step / rl.step_limit : 0.0},
                   {"mfu_peak", rl.mfu_peak}};
  return j;
}

nlohmann::ordered_json to_json(const BenchTrainResult& result) {
  nlohmann::ordered_json out = to_json(result.run);
  if (result.thread_scaling) {
    const ThreadScaling& ts = *result.thread_scaling;
    out["thread_scaling"] = {{"threads", result.run.threads},
                             {"tokens_per_s_1_thread", ts.one_thread.tokens_per_s},
                             {"speedup", ts.speedup},
                             {"one_thread", to_json(ts.one_thread)}};
  }
  return out;
}

void print_run(const BenchTrainRun& r) {
  std::printf(
      "%s, %d thread%s: %.0f tokens/s, %.1f GFLOP/s model, %.1f GFLOP/s GEMM (%s), MFU %.1f%%, "
      "%.2f system allocations per step\n",
      r.precision.c_str(), r.threads, r.threads == 1 ? "" : "s", r.tokens_per_s, r.model_flops_per_s * 1e-9,
      r.gemm_flops_per_s * 1e-9, "1024^3, same dtype", 100 * r.mfu, r.system_allocations_per_step);
  const double step = r.breakdown.step;
  const Roofline& rl = r.roofline;
  std::printf("  limits here: triad %.1f GB/s; GEMM peak %.0f GFLOP/s (%s, %.2f GHz x %d cores)\n",
              rl.triad_bytes_per_s * 1e-9, rl.peak_flops_per_s * 1e-9, rl.peak_basis.c_str(), rl.peak_ghz,
              r.threads);
  std::printf("  %-14s %10s %7s %10s %10s %9s\n", "work", "ms/step", "share", "MB moved", "limit ms",
              "x limit");
  for (size_t k = 0; k < kNumWorkKinds; ++k) {
    const double s = r.breakdown.work[k];
    const std::string name(work_kind_name(static_cast<WorkKind>(k)));
    if (rl.limit[k] > 0)
      std::printf("  %-14s %10.2f %6.1f%% %10.2f %10.3f %8.2fx\n", name.c_str(), s * 1e3, 100 * s / step,
                  static_cast<double>(rl.bytes[k]) * 1e-6, rl.limit[k] * 1e3, s / rl.limit[k]);
    else
      std::printf("  %-14s %10.2f %6.1f%% %10s %10s %9s\n", name.c_str(), s * 1e3, 100 * s / step, "-", "-",
                  "-");
  }
  std::printf("  %-14s %10.2f %6.1f%%\n", "other", r.breakdown.other * 1e3, 100 * r.breakdown.other / step);
  std::printf("  %-14s %10.2f %7s %10s %10.3f %8.2fx\n", "step", step * 1e3, "", "", rl.step_limit * 1e3,
              rl.step_limit > 0 ? step / rl.step_limit : 0.0);
  const double gemm_s = r.breakdown.work[static_cast<size_t>(WorkKind::gemm)];
  if (rl.gemm_flops > 0)
    std::printf(
        "  gemm: %lld problems, %.1f GFLOP/s in the step, %.1f GFLOP/s timed alone at the same problems "
        "(%.0f%% of the peak); MFU %.1f%% of the peak\n",
        static_cast<long long>(rl.gemm_problems), rl.gemm_flops / gemm_s * 1e-9,
        rl.gemm_flops / rl.gemm_own_rate_s * 1e-9,
        rl.peak_flops_per_s > 0 ? 100 * rl.gemm_flops / rl.gemm_own_rate_s / rl.peak_flops_per_s : 0.0,
        100 * rl.mfu_peak);
  std::fflush(stdout);
}

}  // namespace

void register_bench_train(CLI::App* bench, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = bench->add_subcommand("train", "Training-step speed, MFU and the step time by kind of work");
  auto f = std::make_shared<TrainFlags>();
  f->opt.steps = 8;
  f->opt.warmup = 0;
  f->opt.eval_batches = 1;
  auto o = std::make_shared<BenchTrainOpts>();
  auto task = std::make_shared<TaskFlags>();
  add_train_flags(sub, *f, /*with_precision=*/true);
  add_task_flags(sub, *task);
  sub->add_option("--profile-warmup", f->opt.profile_warmup, "Steps left out of the measurement")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  sub->add_flag("--thread-scaling", o->thread_scaling, "Also run at one thread and report the speed-up");
  add_json_option(sub, o->json, "Also the results");
  commands.push_back({[sub] { return sub->parsed(); },
                      [&g, f, o, task, sub] {
                        apply_global_options(g);
                        f->finish();
                        o->json = json_output(*sub, o->json);
                        if (!o->json.empty()) check_output_path(o->json, "--json");
                        // Checked again with the run's inputs (--data, --model, --train, ...).
                        BenchTrainResult r;
                        // A fine-tune of a benchmark's length: --steps (8), --eval-batches (1).
                        if (std::optional<FinetuneOptions> fo = task->short_finetune(*f)) {
                          add_json_output(fo->train, o->json);
                          r = bench_finetune(*fo, o->thread_scaling, print_run);
                        } else {
                          add_json_output(f->opt, o->json);
                          r = bench_train(f->opt, o->thread_scaling, print_run);
                        }
                        if (r.thread_scaling)
                          std::printf("thread scaling 1 -> %d threads: %.2fx\n", r.run.threads,
                                      r.thread_scaling->speedup);
                        if (!o->json.empty()) write_file_atomic(o->json, to_json(r).dump(2) + "\n");
                        return 0;
                      }});
}

}  // namespace mixtrain::cli
