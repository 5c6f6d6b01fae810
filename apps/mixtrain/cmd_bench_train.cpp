// `mixtrain bench train`: the speed of a training step and where its time goes. Trains with every
// option of `train` (the first --profile-warmup steps excluded), then reports tokens/s, model
// FLOP/s, the GEMM rate of the model's dtype measured in the same run, MFU, the step time by kind
// of work (core/profiler.h) and system allocations per steady-state step; --thread-scaling runs
// the same at one thread and at all threads.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mixtrain/kernels/backend.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

struct BenchTrainOpts {
  std::string json;
  bool thread_scaling = false;
};

nlohmann::ordered_json run_one(const TrainOptions& base, const GptConfig& cfg, int threads) {
  set_num_threads(threads);
  TrainOptions o = base;
  o.quiet = true;
  o.profile = true;
  o.eval_every = 0;
  TrainSummary s = train(o);
  const int64_t T = o.seq_len > 0 ? o.seq_len : cfg.block_size;
  const double tokens = static_cast<double>(o.batch_size * T * o.grad_accum * s.profiled_steps);
  const double tok_s = tokens / s.profiled_seconds;
  const double flops = tok_s * (s.model_flops_per_s / s.tokens_per_s);  // model FLOPs per token
  nlohmann::ordered_json all = s.to_json();
  nlohmann::ordered_json j;
  j["precision"] = s.precision;
  j["threads"] = threads;
  j["tokens_per_s"] = tok_s;
  j["model_flops_per_s"] = flops;
  j["gemm_flops_per_s"] = s.gemm_flops_per_s;
  j["mfu"] = flops / s.gemm_flops_per_s;
  j["profiled_steps"] = s.profiled_steps;
  j["breakdown"] = all["breakdown_s_per_step"];
  j["system_allocations_per_step"] = all["system_allocations_per_step"];
  j["peak_bytes"] = all["peak_bytes"];
  return j;
}

void print_one(const nlohmann::ordered_json& j) {
  std::printf("%s, %d thread%s: %.0f tokens/s, %.1f GFLOP/s model, %.1f GFLOP/s GEMM (%s), MFU %.1f%%, "
              "%.2f system allocations per step\n",
              j["precision"].get<std::string>().c_str(), j["threads"].get<int>(), j["threads"].get<int>() == 1 ? "" : "s",
              j["tokens_per_s"].get<double>(), j["model_flops_per_s"].get<double>() * 1e-9,
              j["gemm_flops_per_s"].get<double>() * 1e-9, "1024^3, same dtype", 100 * j["mfu"].get<double>(),
              j["system_allocations_per_step"].get<double>());
  const double step = j["breakdown"]["step"].get<double>();
  std::printf("  %-14s %10s %7s\n", "work", "ms/step", "share");
  for (const auto& [k, v] : j["breakdown"].items()) {
    if (k == "step") continue;
    std::printf("  %-14s %10.2f %6.1f%%\n", k.c_str(), v.get<double>() * 1e3, 100 * v.get<double>() / step);
  }
  std::printf("  %-14s %10.2f\n", "step", step * 1e3);
}

}  // namespace

void register_bench_train(CLI::App* bench, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = bench->add_subcommand("train", "Training-step speed, MFU and the step time by kind of work");
  auto f = std::make_shared<TrainFlags>();
  f->opt.steps = 8;
  f->opt.warmup = 0;
  f->opt.eval_batches = 1;
  auto o = std::make_shared<BenchTrainOpts>();
  add_train_flags(sub, *f, /*with_precision=*/true);
  sub->add_option("--profile-warmup", f->opt.profile_warmup, "Steps left out of the measurement")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  sub->add_flag("--thread-scaling", o->thread_scaling, "Also run at one thread and report the speed-up");
  sub->add_option("--json", o->json, "Also write the results as JSON to FILE");
  commands.push_back({[sub] { return sub->parsed(); }, [&g, f, o] {
    apply_global_options(g);
    f->finish();
    if (f->opt.steps <= f->opt.profile_warmup)
      throw ArgumentError("bench train: --steps " + std::to_string(f->opt.steps) + " leaves no step after the " +
                          std::to_string(f->opt.profile_warmup) + " warm-up steps");
    const GptConfig cfg = GptConfig::from_preset_or_file(f->opt.model);
    const int all = num_threads();
    nlohmann::ordered_json out = run_one(f->opt, cfg, all);
    print_one(out);
    if (o->thread_scaling && all > 1) {
      nlohmann::ordered_json one = run_one(f->opt, cfg, 1);
      print_one(one);
      const double speedup = out["tokens_per_s"].get<double>() / one["tokens_per_s"].get<double>();
      std::printf("thread scaling 1 -> %d threads: %.2fx\n", all, speedup);
      out["thread_scaling"] = {{"threads", all},
                               {"tokens_per_s_1_thread", one["tokens_per_s"]},
                               {"speedup", speedup},
                               {"one_thread", one}};
      set_num_threads(all);
    }
    if (!o->json.empty()) write_file_atomic(o->json, out.dump(2) + "\n");
    return 0;
  }});
}

}  // namespace mixtrain::cli
