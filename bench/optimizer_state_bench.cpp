// AdamW's step over a MiniLM-sized arena (22.7M fp32 parameters, one tensor per 384 x 1536 block
// plus small vectors) with its moments in fp32, bf16 (stochastic rounding) and int8
// (bitsandbytes' block-wise state): time per step with every OpenMP thread, and bytes of state.
// The fp32 kernel moves 28 bytes an element; bf16 state 20, int8 about 14 plus the decoding and the
// code search. Run: build/bench/optimizer_state_bench [--benchmark_repetitions=5].
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>

#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain {
namespace {

ParameterStore minilm_like() {
  ParameterStore s;
  s.declare("embeddings", {30522, 384}, false);
  for (int l = 0; l < 6; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    s.declare(p + "qkv", {1152, 384}, true);
    s.declare(p + "qkv_bias", {1152}, false);
    s.declare(p + "out", {384, 384}, true);
    s.declare(p + "ln1", {384}, false);
    s.declare(p + "up", {1536, 384}, true);
    s.declare(p + "up_bias", {1536}, false);
    s.declare(p + "down", {384, 1536}, true);
    s.declare(p + "ln2", {384}, false);
  }
  s.finalize(DType::f32, DType::f32);
  float* p = s.flat_params().data<float>();
  float* g = s.flat_grads().data<float>();
  for (int64_t i = 0; i < s.flat_numel(); ++i) {
    p[i] = 0.05f * std::sin(0.37f * float(i));
    g[i] = 1e-3f * std::cos(1.3f * float(i)) + 1e-5f;
  }
  return s;
}

void BM_AdamWStep(benchmark::State& st) {
  const StatePrecision prec = static_cast<StatePrecision>(st.range(0));
  ParameterStore s = minilm_like();
  OptimizerConfig c;
  c.state = prec;
  auto opt = make_optimizer(s, c);
  opt->step(s, 1e-4f);  // the first step fills the state
  for (auto _ : st) opt->step(s, 1e-4f);
  st.counters["state_MiB"] = double(opt->state_bytes()) / (1 << 20);
  st.counters["ns_per_element"] = benchmark::Counter(
      double(s.flat_numel()), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  st.SetLabel(std::string(state_precision_name(prec)));
}
BENCHMARK(BM_AdamWStep)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace mixtrain

BENCHMARK_MAIN();
