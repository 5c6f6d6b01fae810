// The GPT trained through the C++ API (no CLI): a precision mode from a string, the built-in
// corpus (or a file given as argv[1]), AdamW with warm-up and clipping. Exits non-zero if the
// validation loss does not fall below the unigram baseline.
#include <cstdio>
#include <string>

#include "mixtrain/data/text_corpus.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/optim/schedule.h"

using namespace mixtrain;

int main(int argc, char** argv) {
  const std::string precision = argc > 2 ? argv[2] : "bf16-mixed";
  const TextCorpus corpus = TextCorpus::load(argc > 1 ? argv[1] : TextCorpus::default_corpus_path());
  GptConfig cfg;
  cfg.n_layer = 2, cfg.n_head = 4, cfg.n_embd = 64, cfg.block_size = 64;
  const int64_t B = 8, T = 64, steps = 150;
  corpus.check_window(T);

  MixedPrecision mp(precision);
  Gpt model(cfg, /*seed=*/1, mp.param_dtype(), mp.grad_dtype());
  AdamWConfig ac;
  ac.weight_decay = 0.1f;
  AdamW opt(model.params(), ac);
  const LrSchedule sched{3e-3f, 20, steps, 3e-4f};

  Tensor idx, targets;
  for (int64_t step = 1; step <= steps; ++step) {
    corpus.train_batch(B, T, /*seed=*/1, step, idx, targets);
    model.params().zero_grads();
    auto out = mp.forward([&] { return model.forward(idx, &targets, /*training=*/true); });
    mp.backward(out.loss);
    const StepResult r = mp.step(opt, model.params(), lr_at(step, sched), /*max_norm=*/1.0);
    if (step % 50 == 0)
      std::printf("step %lld loss %.4f grad norm %.3f\n", static_cast<long long>(step),
                  out.loss.value().item(), r.grad_norm);
  }
  double val = 0;
  int64_t rows = 0;
  {
    autograd::NoGradGuard no_grad;
    for (int64_t b = 0; b < 8; ++b) {
      const int64_t real = corpus.val_batch(b, B, T, idx, targets);
      val += mp.forward([&] { return model.forward(idx, &targets).loss.value().item(); }) *
             static_cast<double>(real);
      rows += real;
    }
  }
  val /= static_cast<double>(rows);
  std::printf("%s: validation loss %.4f, unigram baseline %.4f\n", precision.c_str(), val,
              corpus.unigram_entropy());
  return val < corpus.unigram_entropy() ? 0 : 1;
}
