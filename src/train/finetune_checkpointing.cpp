// The fine-tune's checkpoints: what is captured, when it is saved, how a run resumes
// (train/finetune_checkpointing.h).
#include "train/finetune_checkpointing.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/gpt_weights.h"
#include "train/checkpointing.h"

namespace mixtrain {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "train_state.safetensors";

// JSON has no inf / NaN: those go in as strings, so two option sets still compare equal.
nlohmann::json num(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

// The shared options that shape the trajectory (steps do not: a resumed run may extend it).
nlohmann::json shared_run_options(const TrainOptions& o) {
  nlohmann::json j;
  j["precision"] = std::string(precision_spec(o.precision).name);
  j["update_rounding"] = std::string(update_rounding_name(o.update_rounding));
  j["optimizer"] = std::string(optimizer_kind_name(o.optimizer));
  j["lr"] = num(o.lr);
  j["warmup"] = o.warmup;
  j["weight_decay"] = num(o.weight_decay);
  j["betas_eps_momentum"] = {num(o.beta1), num(o.beta2), num(o.eps), num(o.momentum)};
  j["grad_clip"] = num(o.grad_clip);
  j["seed"] = o.seed;
  j["batch_size"] = o.batch_size;
  j["grad_accum"] = o.grad_accum;
  j["force_loss_scaling"] = o.force_loss_scaling;
  const GradScalerConfig& s = o.scaler;
  j["scaler"] = {num(s.init_scale), num(s.growth_factor), num(s.backoff_factor), s.growth_interval,
                 s.hysteresis,      num(s.min_scale),     num(s.max_scale),      s.dynamic};
  return j;
}

}  // namespace

FinetuneCheckpointing::FinetuneCheckpointing(const TrainOptions& opt, nlohmann::json run_options)
    : opt_(opt), run_(std::move(run_options)) {
  opt.checkpoint.validate();
  run_["shared"] = shared_run_options(opt);
}

TrainingState FinetuneCheckpointing::capture(int64_t step, TrainingRun& r) const {
  TrainingState s;
  s.step = step;
  s.precision = std::string(precision_spec(opt_.precision).name);
  s.run = run_;
  const ParameterStore& store = r.model().params();
  s.params = store.flat_params();
  s.optimizer = r.optimizer().state();
  s.scaler = r.mp().scaler().state();
  s.counters.skipped_steps = r.summary().skipped_steps;
  s.counters.overflows = r.summary().overflows;
  s.counters.bad_in_a_row = r.bad_in_a_row();
  s.counters.hit_min_scale = r.summary().hit_min_scale;
  s.counters.last_loss = r.summary().final_train_loss;
  s.rng = {{"seed", opt_.seed},
           {"data_position", step * opt_.grad_accum},
           {"stochastic_rounding_counter", s.optimizer.steps * store.flat_numel()}};
  return s;
}

bool FinetuneCheckpointing::should_stop(TrainingRun& r, const StepRecord& rec) {
  const int64_t step = rec.step;
  const CheckpointOptions& c = opt_.checkpoint;
  const int64_t last = r.config().steps;
  const bool stop = c.stop_after > 0 && step == c.stop_after && step < last;
  const bool due = step == last || stop || r.summary().interrupted || (c.save_every > 0 && step % c.save_every == 0);
  if (!c.dir.empty() && due) {
    std::vector<CheckpointFile> files(2);
    files[0].name = kModelFile;
    files[0].bytes = model_safetensors_writer(r.model()).serialize();
    files[1].name = kStateFile;
    files[1].bytes = encode_training_state(capture(step, r));
    nlohmann::ordered_json info;
    info["precision"] = std::string(precision_spec(opt_.precision).name);
    info["model"] = nlohmann::json::parse(r.model().config_json());
    const std::string saved = write_checkpoint(c.dir, step, files, info);
    prune_checkpoints(c.dir, c.keep);
    r.summary().checkpoint_path = saved;
    if (!opt_.quiet) {
      std::printf("%scheckpoint saved: %s (step %lld)\n", isatty(1) ? "\n" : "", saved.c_str(),
                  static_cast<long long>(step));
      std::fflush(stdout);
    }
  }
  if (stop && !opt_.quiet) {
    std::printf("stopped after step %lld (--stop-after)%s%s\n", static_cast<long long>(step),
                c.dir.empty() ? "" : "; continue with --resume ", c.dir.c_str());
    std::fflush(stdout);
  }
  return stop;
}

void FinetuneCheckpointing::on_run_start(TrainingRun& r) {
  const int64_t start = restore(r);
  const std::string& dir = opt_.checkpoint.dir;
  if (!dir.empty()) {
    const auto all = list_checkpoints(dir);
    if (opt_.checkpoint.resume.empty() && !all.empty())
      throw ArgumentError({"checkpoint.resume"}, "checkpoint directory " + dir + " already holds checkpoints (newest " +
                                                     all.back().second + "): continue them with checkpoint.resume=" +
                                                     dir + ", or choose another directory");
    for (const auto& [step, path] : all) {
      if (step <= start) continue;
      // Newer than where this run continues: moved aside (not deleted), as train() does.
      const std::filesystem::path p(path);
      const std::string base = (p.parent_path() / ("abandoned-" + p.filename().string())).string();
      std::string aside = base;
      for (int k = 1; std::filesystem::exists(aside); ++k) {  // appended in parts: GCC 12 warns falsely on a + chain
        aside = base;
        aside += '~';
        aside += std::to_string(k);
      }
      std::error_code ec;
      std::filesystem::rename(path, aside, ec);
      if (ec) throw IoError("cannot move " + path + " to " + aside + ": " + ec.message());
      std::fprintf(stderr, "mixtrain: warning: moved %s to %s: it is newer than step %lld, where this run continues\n",
                   path.c_str(), aside.c_str(), static_cast<long long>(start));
    }
  }
  r.set_start_step(start);
}

int64_t FinetuneCheckpointing::restore(TrainingRun& r) {
  const std::string& path = opt_.checkpoint.resume;
  if (path.empty()) return 0;
  auto warn = [](const std::string& line) { std::fprintf(stderr, "mixtrain: warning: %s\n", line.c_str()); };
  std::optional<TrainingState> state;
  auto check = [&](const LoadedCheckpoint& c) {
    const auto it = c.files.find(kStateFile);
    if (it == c.files.end()) throw IoError("checkpoint " + c.path + ": no " + kStateFile);
    state = decode_training_state(it->second, c.path + "/" + kStateFile);
    if (state->step != c.step)
      throw IoError("checkpoint " + c.path + ": the manifest says step " + std::to_string(c.step) +
                    ", the training state step " + std::to_string(state->step));
  };
  const std::optional<LoadedCheckpoint> found = resolve_checkpoint(path, check, warn);
  if (!found) {
    if (is_single_checkpoint(path) || std::filesystem::exists(std::filesystem::path(path) / kStateFile))
      throw IoError("checkpoint " + path + " is invalid: no manifest.json (an incomplete or damaged checkpoint)");
    warn("no checkpoint in " + path + " yet; starting from step 0");
    return 0;
  }
  const TrainingState& s = *state;
  const std::string where = "cannot resume from " + found->path + ": ";
  const std::string diff = first_difference(s.run, run_);
  if (!diff.empty()) throw ArgumentError(where + "options differ, " + diff);
  if (s.step > r.config().steps)
    throw ArgumentError({"steps"}, where + "it is at step " + std::to_string(s.step) + ", past the run's last step " +
                                       std::to_string(r.config().steps));
  ParameterStore& store = r.model().params();
  const std::string bad = "checkpoint " + found->path + ": ";
  if (s.params.numel() != store.flat_numel())
    throw IoError(bad + "'params' has " + std::to_string(s.params.numel()) + " elements, the model " +
                  std::to_string(store.flat_numel()));
  try {
    r.optimizer().restore(s.optimizer);
    r.mp().scaler().load_state(s.scaler);
  } catch (const ArgumentError& e) {
    throw IoError(bad + "optimizer or loss scaler state: " + e.what());
  }
  Tensor flat = store.flat_params();  // shares the storage
  flat.copy_from(s.params);
  store.flat_params().storage()->bump_version();  // cached autocast copies are stale
  TrainSummary& sum = r.summary();
  sum.skipped_steps = s.counters.skipped_steps;
  sum.overflows = s.counters.overflows;
  sum.hit_min_scale = s.counters.hit_min_scale;
  sum.final_train_loss = s.counters.last_loss;
  r.bad_in_a_row() = s.counters.bad_in_a_row;
  if (!opt_.quiet) {
    std::printf("resumed from %s at step %lld\n", found->path.c_str(), static_cast<long long>(s.step));
    std::fflush(stdout);
  }
  return s.step;
}

}  // namespace mixtrain
