// Everything beyond the weights that a resumed run needs to continue bit for bit, as one
// safetensors file (train_state.safetensors): the flat buffers as tensors, the rest as JSON in
// the "mixtrain" metadata entry.
//
//   tensors  params                (flat_numel) the parameters in their training dtype: the fp32
//                                  master weights in 32-true / *-mixed, f16 / bf16 in *-true
//            optim.exp_avg         (flat_numel) AdamW m   } in the optimizer's state dtype (the
//            optim.exp_avg_sq      (flat_numel) AdamW v   } parameter dtype; f32 with master)
//            optim.momentum_buffer (flat_numel) SGD, momentum != 0 only
//            optim.compensation    (flat_numel) Kahan compensation, kahan rounding only
//            optim.master          (flat_numel) f32 master weights, master rounding only
//            fp8.amax_history      (sites * 3 * amax_history) f32, fp8-mixed only (amp/fp8.h:
//                                  the histories as a ring, site by site, role by role)
//            fp8.scale             (sites * 3) f32, fp8-mixed only: each site's scales
//            dist.error_feedback   (flat_numel) f32, compressed gradient sums only (--grad-reduce-
//                                  dtype int8 / fp8, train/data_parallel.h): the rounding errors not
//                                  yet sent, summed over the ranks (unscaled)
//   metadata format "mixtrain-train-state", version "1", mixtrain: {step, precision, model (the
//            model's configuration, Model::config_json(): a GptConfig, an encoder's config.json;
//            any JSON object), run (the options that shape the trajectory, compared on resume),
//            optimizer {kind, steps}, scaler {scale, growth_tracker, hysteresis_left, overflows,
//            skipped_steps}, counters {skipped_steps, overflows, bad_in_a_row, hit_min_scale,
//            last_loss, skips_by_site {site: count} (absent in older states: none)}, rng {seed,
//            data_position, stochastic_rounding_counter}, fp8 {sites, amax_history, updates}
//            (fp8-mixed only)}
// Every random stream in mixtrain is counter-based (data windows and dropout from (seed,
// position), stochastic rounding from (seed, optimizer step * flat_numel + i)), so the RNG state
// is the seed and the counters; they are recorded so a reader can see where each stream stands.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct TrainCounters {
  int64_t skipped_steps = 0;
  int64_t overflows = 0;
  int64_t bad_in_a_row = 0;  // consecutive non-finite losses (the divergence rule)
  bool hit_min_scale = false;
  double last_loss = 0;                          // loss of the last step (NaN if non-finite)
  std::map<std::string, int64_t> skips_by_site;  // TrainSummary::skips_by_site
};

// fp8-mixed's amax histories and scales (amp/fp8.h: Fp8State::Snapshot), absent in other modes.
struct Fp8TrainingState {
  int64_t sites = 0, amax_history = 0, updates = 0;
  Tensor history;  // (sites * 3 * amax_history) f32
  Tensor scale;    // (sites * 3) f32
  bool present() const { return history.defined(); }
};

struct TrainingState {
  int64_t step = 0;                                 // optimizer steps completed (the next one is step + 1)
  std::string precision;                            // "bf16-mixed"
  nlohmann::json model = nlohmann::json::object();  // the model's configuration (Model::config_json())
  nlohmann::json run = nlohmann::json::object();    // trajectory-shaping options
  Tensor params;                                    // (flat_numel)
  OptimizerState optimizer;                         // optim/optimizer.h
  GradScalerState scaler;
  TrainCounters counters;
  nlohmann::json rng = nlohmann::json::object();  // {seed, data_position, stochastic_rounding_counter}
  Fp8TrainingState fp8;
  Tensor error_feedback;  // (flat_numel) f32, or undefined: compressed sums' residual over ranks
};

std::vector<uint8_t> encode_training_state(const TrainingState& s);
// Parses and validates a train_state.safetensors image (`name` for messages). IoError (one line
// naming the file and the field) for anything malformed: wrong JSON types, missing or extra
// tensors, tensors that are not 1-D of one common length, state dtypes that differ from the
// parameters' or do not fit the precision, negative counters (or skips by site that add up to
// more than skipped_steps), a non-positive scale.
TrainingState decode_training_state(std::vector<uint8_t> bytes, const std::string& name);

}  // namespace mixtrain
