// Precision advice from measured ranges (`mixtrain numerics --advise`): a configuration runs a
// few steps in 32-true with the numerics probes on every step (train/numerics_hook.h), and each
// precision mode is judged from what the probes saw:
// - 16-mixed: GEMM-family outputs (linear, matmul, attention) that overflow fp16; the loss scale
//   range that keeps 99.9% of the activation gradients' magnitude (sum of |g|; and, for
//   comparison, of the weight gradients') above fp16's smallest normal (2^-14) while the largest
//   activation gradient stays below 65504;
// - 16-true: any op output that overflows fp16, weight gradients lost to fp16 without a loss
//   scale, updates below half an fp16 ulp of their weight;
// - bf16-mixed / bf16-true: bf16 overflows (rare: bf16 has fp32's range) and, for bf16-true,
//   updates below half a bf16 ulp (lost to nearest rounding: Kahan or stochastic rounding);
// - fp8-mixed: every linear layer of the transformer blocks (the fp8 candidates, first and last
//   block included) has its input, weight and output gradient quantized, on the side, by each fp8
//   recipe as that recipe's GEMMs would (both orientations), the GEMMs themselves staying fp32;
//   a site is safe under a recipe and format when each role's relative error (||q - x|| / ||x||)
//   and underflow share are within their bounds (kFp8ErrorBound*, kFp8UnderflowBound below). Delayed scaling
//   is judged from the second step (its first casts at scale 1, as Transformer Engine's; from then on each
//   scale comes from the earlier steps' amaxes, history and margin as configured): the probed steps are a
//   run's first, where amaxes still grow, so what clips here clips at the start of a real run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/train/finetune.h"
#include "mixtrain/train/fp8_advice.h"
#include "mixtrain/train/train_options.h"

namespace mixtrain {

struct OverflowingSite {
  std::string site, op;  // module path and op ("transformer.h.5.mlp.c_proj", "linear")
  float amax = 0;        // the largest |x| measured there in fp32
};

struct ModeAdvice {
  std::string mode;                // "16-mixed", "16-true", "bf16-mixed", "bf16-true"
  bool safe = true;                // nothing below calls for a change
  std::vector<std::string> lines;  // what was measured and what to do
};

struct NumericsAdvice {
  int64_t steps = 0;                          // probed fp32 steps
  std::vector<OverflowingSite> fp16_forward;  // GEMM-family outputs past 65504
  std::vector<OverflowingSite> fp16_any;      // any op output past 65504 (16-true)
  std::vector<OverflowingSite> bf16_any;      // any op output or gradient past bf16's max
  // Loss scale 2^k for 16-mixed: the smallest k that keeps 99.9% of the weight gradients'
  // magnitude (sum of |g|) >= 2^-14 (what a framework that stores them in fp16 needs), the same for the
  // activation gradients (fp16 under mixtrain's autocast, whose weight gradients accumulate in
  // fp32: this one decides), and the largest k that keeps every activation gradient below
  // 65504. min_activation > max: no scale does both.
  int min_loss_scale_log2 = 0;
  int min_activation_scale_log2 = 0;
  int max_loss_scale_log2 = 0;
  double fp16_grads_lost_unscaled = 0;  // weight gradients flushed or subnormal in fp16 at scale 1
  double bf16_updates_lost = 0;         // updates below half a bf16 ulp of their weight
  double fp16_updates_lost = 0;         // the same in fp16
  std::vector<Fp8SiteAdvice> fp8;       // the fp8 candidates in model order (none: the model has none)
  std::vector<ModeAdvice> modes;
  std::string text() const;  // every mode's lines, one per line
};

// Runs `opt` (its model, data, batch, optimizer, lr; forced to 32-true, opt.steps steps, no step
// log) with the probes on every step and returns the advice. opt.add_hooks still runs (a rig).
NumericsAdvice advise_numerics(const TrainOptions& opt);
// The same for a fine-tune (`mixtrain finetune --advise`): opt.train's steps of the fine-tune,
// in 32-true with the probes on every step; nothing saved.
NumericsAdvice advise_finetune_numerics(const FinetuneOptions& opt);

}  // namespace mixtrain
