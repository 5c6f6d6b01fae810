// What one step costs the TensorBoard writer (train/event_file.h): encoding and writing the
// event `--tensorboard` writes per step (18 scalars: the step log's and 9 memory categories),
// one write(2) each, into a temporary directory. Compare with a step's time (`mixtrain bench
// train`); bench/tensorboard_overhead.sh measures the same side by side in whole runs.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "train/event_file.h"

namespace {

void BM_WriteStepEvent(benchmark::State& state) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mixtrain_event_bench_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    mixtrain::EventFileWriter w(dir.string());
    mixtrain::ScalarEvent e;
    for (const char* tag :
         {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "amp/loss_scale", "amp/skipped",
          "amp/found_inf", "amp/overflows", "val/loss", "memory/parameters_mib", "memory/master_weights_mib",
          "memory/gradients_mib", "memory/optimizer_state_mib", "memory/activations_mib",
          "memory/workspace_mib", "memory/cast_cache_mib", "memory/data_mib", "memory/total_mib"})
      e.values.emplace_back(tag, 1.5f);
    for (auto _ : state) {
      ++e.step;
      w.write(e);
    }
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_WriteStepEvent);

}  // namespace

BENCHMARK_MAIN();
