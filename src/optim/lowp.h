// How the optimizers write an fp32 result back into 16-bit parameters and state (the *-true
// precision modes, Lightning's 16-true / bf16-true: parameters, gradients and optimizer state all
// 16-bit). Every 16-bit element is loaded to fp32, updated exactly as the fp32 kernel does, then
// rounded back:
//   optimizer state (AdamW m, v; SGD momentum): always round-to-nearest-even.
//   parameters, per UpdateRounding (kernels/optimizer_kernels.h):
//     nearest     round-to-nearest-even (Lightning's behaviour). An update below half an ulp of
//                 the parameter is lost: bf16 at 1.0 drops every |update| < 2^-8.
//     stochastic  round up with probability proportional to the distance (Zamirai et al. 2020,
//                 "Revisiting BFloat16 Training"; llm.c): unbiased, so small updates survive in
//                 expectation. Element i of step k (0-based) draws counter_rng(seed, k*flat_numel + i):
//                 deterministic for any thread count.
//     kahan       compensated summation (Kahan 1965; Zamirai et al. 2020): a 16-bit buffer c per
//                 parameter (MemCategory::optimizer_state) carries what rounding dropped:
//                   u = x - p            the fp32 update (x: the fp32 kernel's new value)
//                   y = u + c
//                   p' = rn16(p + y)     rn16: round to nearest even
//                   c  = rn16(y - (p' - p))
//                 (p' - p is exact in fp32). With c = 0 it reduces to nearest. In f16, a
//                 compensation below 2^-14 is subnormal and keeps fewer bits (parameters
//                 below ~2^-3 in magnitude); a non-finite update leaves c NaN, like p.
//     master      no 16-bit update at all: the optimizer keeps fp32 master weights and fp32 state
//                 (optim/master_weights.h) and runs the fp32 kernels on them from the 16-bit
//                 gradients; each weight is the master rounded to nearest (DeepSpeed's bf16 / fp16
//                 optimizer). Costs 4 bytes per element for the masters, and the moments in fp32.
// Why the state stays nearest under stochastic: m and v feed the update's direction and scale,
// not an accumulation the user reads; rounding them stochastically would add noise to the
// denominator and cost two more random draws per element, and it is what torchao's bf16
// stochastic-rounding AdamW and llm.c do too (only the parameter is rounded stochastically).
#pragma once
#include <cstdint>

#include "mixtrain/kernels/optimizer_kernels.h"

namespace mixtrain {

// LowpWrite (kernels/optimizer_kernels.h) carries the rounding, seed and counter base.

}  // namespace mixtrain
