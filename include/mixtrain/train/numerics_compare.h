// Forensics of two runs that should agree and do not (`mixtrain numerics --compare BASE RUN`):
// typically a bf16-mixed run and an fp8-mixed run of one configuration (same seed, same batches),
// each written with --numerics. Where the run's loss parts from the base's, which site parted
// first, and which fp8 casts lost their tensors on the way (Transformer Engine users ask "my fp8
// loss drifts from bf16's: where?", TE issues 841 and 1419).
//
//   loss departure   the first step both files sampled where the runs' mean losses over the last
//                    `window` steps both sampled differ by more than loss_bound x the base's (a
//                    single step's loss moves by several percent from batch to batch), or where one
//                    loss is not finite and the other is;
//   site departure   per site (site, op, kind: forward output, activation gradient, weight, weight
//                    gradient), the first sampled step where its amax in the two runs differs by
//                    more than site_bound x the larger of the two; the first site apart is the one
//                    with the earliest such step, ties broken by the base file's order at that
//                    step (forward outputs in model order, then gradients in backward order);
//   fp8 evidence     the run's fp8 cast records (kind "fp8") up to the loss departure (or the
//                    last step) whose relative error or underflow share is over the fp8 advice's
//                    bounds (train/fp8_advice.h), worst first (the most times over either bound),
//                    each with the steps it was over.
// A file records the loss of each sampled step in every record ("loss"); a file without any
// (written before it did) is refused with a one-line error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mixtrain {

struct SiteDeparture {
  std::string site, op, kind;  // "transformer.h.2.mlp.c_fc", "linear", "grad"
  int64_t step = 0;            // the first sampled step where the amaxes differ past the bound
  double amax_base = 0, amax_run = 0;
};

struct Fp8CastTrouble {
  std::string site, role, format, recipe;  // "transformer.h.2.mlp.c_fc", "grad_output", "f8_e4m3"
  int64_t first_step = 0, steps_over = 0;  // the first step over a bound, and on how many steps
  double worst_rel_error = 0, worst_underflow = 0, worst_saturated = 0;
  double bound = 0;  // the relative-error bound of its format
};

struct NumericsComparison {
  std::string base_path, run_path;
  int64_t steps_compared = 0;  // sampled steps present in both files
  double loss_bound = 0, site_bound = 0;
  int64_t loss_window = 0;
  int64_t loss_step = -1;              // the loss departure (-1: none)
  double loss_base = 0, loss_run = 0;  // there: the windows' means (one not finite: the step's losses)
  int64_t worst_step = 0;              // where the means were furthest apart (the departure, if any)
  double worst_relative = 0;
  std::vector<SiteDeparture> sites;  // every site that departed, the first apart first
  std::vector<Fp8CastTrouble> fp8;   // the run's casts over their bounds, worst first
  std::string text() const;          // the findings and what to try, one per line
};

// Reads both files (IoError "<path>:<line>: ..." for a line that is not a numerics record,
// "<path>: ..." for a file without losses or with no step in common with the other) and compares.
NumericsComparison compare_numerics(const std::string& base_path, const std::string& run_path,
                                    double loss_bound = 0.01, double site_bound = 0.10, int64_t window = 5);

}  // namespace mixtrain
