// A user's program against the installed mixtrain (only the public headers, through the umbrella
// header): a tiny GPT trained for a few steps in bf16-mixed on text it makes itself, through the
// engine (TrainingRun) with a hook of its own. Exits non-zero unless the loss fell and every step
// was seen by the hook.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "mixtrain/mixtrain.h"

using namespace mixtrain;

struct CountSteps final : TrainingHook {
  int steps = 0;
  double first = NAN, last = NAN;
  void on_step_end(TrainingRun&, const StepRecord& r) override {
    ++steps;
    if (steps == 1) first = r.loss;
    last = r.loss;
  }
};

int main() {
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
  const TextCorpus corpus =
      TextCorpus::from_bytes(std::vector<uint8_t>(text.begin(), text.end()), "inline text");
  GptConfig cfg;
  cfg.n_layer = 1, cfg.n_head = 2, cfg.n_embd = 32, cfg.block_size = 32;
  MixedPrecision mp("bf16-mixed");
  Gpt model(cfg, /*seed=*/1, mp.param_dtype(), mp.grad_dtype());
  OptimizerConfig oc;
  oc.lr = 3e-3f;
  const std::unique_ptr<Optimizer> opt = make_optimizer(model.params(), oc);
  const LmWindows data(corpus, /*batch_size=*/4, /*seq_len=*/32, /*seed=*/1);
  RunConfig rc;
  rc.steps = 12;
  rc.schedule = LrSchedule{3e-3f, 2, rc.steps, 3e-4f};
  rc.eval_batches = 2;
  TrainingRun run(model, *opt, mp, data, rc);
  CountSteps& seen = run.add_hook(std::make_unique<CountSteps>());
  const TrainSummary s = run.run();
  std::printf("consumer: %d steps, loss %.4f -> %.4f, val_loss %.4f, mixtrain %s\n", seen.steps, seen.first,
              seen.last, s.val_loss, MIXTRAIN_VERSION);
  return seen.steps == 12 && seen.last < seen.first && std::isfinite(s.val_loss) ? 0 : 1;
}
