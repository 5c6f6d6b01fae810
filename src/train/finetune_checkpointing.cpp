// The fine-tune's checkpoints: the options compared on resume and the model's files
// (train/finetune_checkpointing.h); saving and resuming are CheckpointHook's.
#include "train/finetune_checkpointing.h"

#include <cstdlib>

#include "checkpoint/gpt_weights.h"

namespace mixtrain {
namespace {

// The shared options that shape the trajectory (steps do not: a resumed run may extend it).
nlohmann::json shared_run_options(const RunOptions& o) {
  nlohmann::json j;
  j["precision"] = std::string(precision_spec(o.precision).name);
  // Recorded where it is not the default, so checkpoints from before the option resume as they did.
  if (o.matmul_precision != MatmulPrecision::highest)
    j["matmul_precision"] = std::string(matmul_precision_name(o.matmul_precision));
  if (o.precision == PrecisionMode::mixed_fp8) j["fp8"] = fp8_run_options(o.fp8);
  j["update_rounding"] = std::string(update_rounding_name(o.update_rounding));
  j["optimizer"] = std::string(optimizer_kind_name(o.optimizer));
  // Recorded where it is not the default, so checkpoints from before the option resume as they did.
  if (o.optim_state != StatePrecision::fp32)
    j["optim_state"] = std::string(state_precision_name(o.optim_state));
  j["lr"] = json_number(o.lr);
  j["warmup"] = o.warmup;
  j["weight_decay"] = json_number(o.weight_decay);
  j["betas_eps_momentum"] = {json_number(o.beta1), json_number(o.beta2), json_number(o.eps),
                             json_number(o.momentum)};
  j["grad_clip"] = json_number(o.grad_clip);
  j["seed"] = o.seed;
  j["batch_size"] = o.batch_size;
  j["grad_accum"] = o.grad_accum;
  j["force_loss_scaling"] = o.force_loss_scaling;
  const GradScalerConfig& s = o.scaler;
  j["scaler"] = {json_number(s.init_scale),
                 json_number(s.growth_factor),
                 json_number(s.backoff_factor),
                 s.growth_interval,
                 s.hysteresis,
                 json_number(s.min_scale),
                 json_number(s.max_scale),
                 s.dynamic};
  return j;
}

nlohmann::json with_shared(nlohmann::json run_options, const RunOptions& opt) {
  run_options["shared"] = shared_run_options(opt);
  return run_options;
}

}  // namespace

FinetuneCheckpointing::FinetuneCheckpointing(const RunOptions& opt, nlohmann::json run_options,
                                             EpochSums& epoch)
    : CheckpointHook(opt, with_shared(std::move(run_options), opt), "the run's last step"), epoch_(epoch) {}

nlohmann::json FinetuneCheckpointing::task_state() const {
  return {{"epoch_loss_sum", json_number(epoch_.loss_sum)}, {"epoch_steps", epoch_.steps}};
}

void FinetuneCheckpointing::restore_task_state(const nlohmann::json& s) {
  if (s.is_null()) return;  // saved before the epoch's sums were kept: the mean covers this part
  const auto& sum = s.value("epoch_loss_sum", nlohmann::json());
  const auto& steps = s.value("epoch_steps", nlohmann::json());
  const bool ok =
      (sum.is_number() || sum.is_string()) && steps.is_number_integer() && steps.get<int64_t>() >= 0;
  if (!ok) throw IoError("checkpoint manifest: task_state is not {epoch_loss_sum, epoch_steps}");
  epoch_.loss_sum =
      sum.is_number() ? sum.get<double>() : std::strtod(sum.get<std::string>().c_str(), nullptr);
  epoch_.steps = steps.get<int64_t>();
}

std::vector<uint8_t> FinetuneCheckpointing::weights_file(TrainingRun& r) const {
  return model_safetensors_writer(r.model()).serialize();
}

nlohmann::json FinetuneCheckpointing::manifest_model(TrainingRun& r) const {
  return nlohmann::json::parse(r.model().config_json());
}

}  // namespace mixtrain
