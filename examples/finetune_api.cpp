// Fine-tuning a pretrained encoder from C++: all-MiniLM-L6-v2 (built in) with a new head on the
// first Fine Foods reviews, bf16-mixed, Hugging Face's Trainer defaults (AdamW, lr 5e-5, linear
// decay). The memory is predicted first on the meta device (nothing allocated), then the run is
// measured against it; a hook of our own prints every step. The same run on another task is a
// Recipe of its own (mixtrain/train/recipe.h), run by run_recipe with these options.
// Exits non-zero unless the losses are finite and the prediction is the measured peak, to the byte.
#include <cmath>
#include <cstdio>
#include <memory>

#include "mixtrain/mixtrain.h"

using namespace mixtrain;

struct PrintStep final : TrainingHook {
  void on_step_end(TrainingRun&, const StepRecord& r) override {
    std::printf("step %lld  loss %.4f  lr %.2e\n", static_cast<long long>(r.step), r.loss,
                static_cast<double>(r.lr));
  }
};

int main() {
  FinetuneOptions o;  // the built-in MiniLM and Fine Foods reviews (`mixtrain finetune`'s defaults)
  o.train_examples = 96;
  o.test_examples = 48;
  o.max_len = 64;
  o.train.precision = PrecisionMode::mixed_bf16;
  o.train.quiet = true;  // no progress lines: the hook prints
  o.train.add_hooks = [](TrainingRun& run) { run.add_hook(std::make_unique<PrintStep>()); };
  const MemoryPrediction p = predict_finetune_memory(o);
  std::printf("predicted peak %.1f MiB (%lld parameters), at %s\n", p.peak_bytes / 1048576.0,
              static_cast<long long>(p.parameters), p.peak_moment.c_str());

  const FinetuneSummary s = finetune(o);
  std::printf(
      "%s: %lld steps, test accuracy %.1f%% (majority %.1f%%), test loss %.4f, measured peak %.1f MiB, MFU "
      "%.1f%%\n",
      s.run.precision.c_str(), static_cast<long long>(s.run.steps), 100 * s.test_accuracy(),
      100 * s.majority_baseline, s.run.val_loss, s.run.memory.peak_total / 1048576.0, 100 * s.run.mfu);
  const bool finite = std::isfinite(s.run.val_loss) && std::isfinite(s.epochs.back().train_loss);
  return finite && s.run.memory.peak_total == p.peak_bytes ? 0 : 1;
}
