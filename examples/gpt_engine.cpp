// The training engine from C++: a GPT, an optimizer, a precision mode and a data source handed to
// a TrainingRun, with a hook of our own that prints every 25th step and stops the run early if
// the loss goes non-finite. Exits non-zero unless the validation loss beats the unigram baseline.
//   example_gpt_engine [TEXT_FILE] [PRECISION]
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "mixtrain/mixtrain.h"

using namespace mixtrain;

struct PrintEvery final : TrainingHook {
  void on_step_end(TrainingRun&, const StepRecord& r) override {
    if (r.step % 25 == 0)
      std::printf("step %3lld  loss %.4f  grad norm %.3f  %s\n", static_cast<long long>(r.step), r.loss,
                  r.grad_norm, r.skipped ? "(skipped)" : "");
  }
  bool should_stop(TrainingRun&, const StepRecord& r) override { return !std::isfinite(r.loss); }
};

int main(int argc, char** argv) {
  const TextCorpus corpus = TextCorpus::load(argc > 1 ? argv[1] : TextCorpus::default_corpus_path());
  MixedPrecision mp(argc > 2 ? argv[2] : "bf16-mixed");
  GptConfig cfg;
  cfg.n_layer = 2, cfg.n_head = 4, cfg.n_embd = 64, cfg.block_size = 64;
  // The weights' memory category: the fp32 master copy in the *-mixed modes (for the memory report).
  Gpt model(cfg, /*seed=*/1, mp.param_dtype(), mp.grad_dtype(), weights_category(mp.spec()));
  OptimizerConfig oc;  // AdamW by default; oc.kind = OptimizerKind::sgd for SGD
  oc.weight_decay = 0.1f;
  const std::unique_ptr<Optimizer> opt = make_optimizer(model.params(), oc);
  const LmWindows data(corpus, /*batch_size=*/8, /*seq_len=*/64, /*seed=*/1);
  RunConfig rc;
  rc.steps = 150;
  rc.schedule = LrSchedule{3e-3f, 20, rc.steps, 3e-4f};  // peak, warm-up, total, floor
  rc.grad_clip = 1.0;
  TrainingRun run(model, *opt, mp, data, rc);
  run.add_hook(std::make_unique<PrintEvery>());
  const TrainSummary s = run.run();
  std::printf("%s: validation loss %.4f, unigram baseline %.4f, %.0f tokens/s\n", s.precision.c_str(),
              s.val_loss, s.unigram_baseline, s.tokens_per_s);
  return s.val_loss < s.unigram_baseline ? 0 : 1;
}
