// `mixtrain bench gemm|convert`: speed figures measured side by side in one run (mixtrain vs
// oneDNN called directly; bf16 vs fp32; conversion vs memcpy bandwidth).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "convert_bench.h"
#include "gemm_bench.h"

namespace mixtrain::cli {

void register_bench(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (speed is measured here, never in tests)");
  bench->require_subcommand(1);

  struct GemmOpts {
    std::string json;
    double min_seconds = 0.5;
  };
  auto gemm_opts = std::make_shared<GemmOpts>();
  auto* gemm =
      bench->add_subcommand("gemm", "GEMM GF/s for fp32, bf16, fp16 through mixtrain and oneDNN directly");
  add_json_option(gemm, gemm_opts->json, "Also the results");
  gemm->add_option("--min-seconds", gemm_opts->min_seconds, "Timed seconds per case and implementation")
      ->check(CLI::Range(0.01, 60.0));
  commands.push_back({[gemm] { return gemm->parsed(); },
                      [&g, gemm_opts, gemm] {
                        apply_global_options(g);
                        gemm_opts->json = json_output(*gemm, gemm_opts->json);
                        if (!std::isfinite(gemm_opts->min_seconds))  // CLI::Range lets NaN through
                          throw ArgumentError("--min-seconds must be a number in [0.01, 60], got " +
                                              std::to_string(gemm_opts->min_seconds));
                        if (!gemm_opts->json.empty()) check_output_path(gemm_opts->json, "--json");
                        const auto results =
                            run_gemm_bench(default_gemm_bench_shapes(), gemm_opts->min_seconds);
                        std::printf("%s", gemm_bench_table(results).c_str());
                        if (!gemm_opts->json.empty())
                          write_file_atomic(gemm_opts->json, gemm_bench_to_json(results).dump(2) + "\n");
                        return 0;
                      }});

  struct ConvertOpts {
    std::string json;
    int64_t mib = 64;
  };
  auto conv_opts = std::make_shared<ConvertOpts>();
  auto* conv = bench->add_subcommand("convert", "Bulk conversion GB/s beside memcpy (the bandwidth ceiling)");
  add_json_option(conv, conv_opts->json, "Also the results");
  conv->add_option("--mib", conv_opts->mib, "MiB of fp32 input")->check(CLI::Range(1, 16384));
  commands.push_back({[conv] { return conv->parsed(); },
                      [&g, conv_opts, conv] {
                        apply_global_options(g);
                        conv_opts->json = json_output(*conv, conv_opts->json);
                        if (!conv_opts->json.empty()) check_output_path(conv_opts->json, "--json");
                        const auto results = run_convert_bench(conv_opts->mib * (1 << 20) / 4);
                        std::printf("%s", convert_bench_table(results).c_str());
                        if (!conv_opts->json.empty())
                          write_file_atomic(conv_opts->json, convert_bench_to_json(results).dump(2) + "\n");
                        return 0;
                      }});
  register_bench_train(bench, g, commands);
}

}  // namespace mixtrain::cli
