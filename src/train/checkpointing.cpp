// The trainer's checkpoints: what is captured, when it is saved, and how a run resumes.
#include "train/checkpointing.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "checkpoint/checksum.h"
#include "checkpoint/gpt_weights.h"
#include "core/file_io.h"
#include "core/json_input.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/data/text_corpus.h"
#include "mixtrain/train/train_options.h"
#include "models/gpt_config_json.h"

namespace mixtrain {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "train_state.safetensors";

nlohmann::json num(double v) { return json_number(v); }

void warn(const std::string& line) { std::fprintf(stderr, "mixtrain: warning: %s\n", line.c_str()); }

// The options that shape the loss trajectory (--steps does not: a resumed run may extend it).
nlohmann::json run_options(const TrainOptions& o, int64_t T, const TextCorpus& corpus) {
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
  j["lr"] = num(o.lr);
  j["min_lr_ratio"] = num(o.min_lr_ratio);
  j["warmup"] = o.warmup;
  j["weight_decay"] = num(o.weight_decay);
  if (o.optimizer == OptimizerKind::adamw) {
    j["beta1"] = num(o.beta1);
    j["beta2"] = num(o.beta2);
    j["eps"] = num(o.eps);
  } else {
    j["momentum"] = num(o.momentum);
  }
  j["grad_clip"] = num(o.grad_clip);
  j["seed"] = o.seed;
  j["batch_size"] = o.batch_size;
  j["seq_len"] = T;
  j["grad_accum"] = o.grad_accum;
  j["force_loss_scaling"] = o.force_loss_scaling;
  const GradScalerConfig& s = o.scaler;
  j["scaler"] = {{"dynamic", s.dynamic},
                 {"init_scale", num(s.init_scale)},
                 {"growth_factor", num(s.growth_factor)},
                 {"backoff_factor", num(s.backoff_factor)},
                 {"growth_interval", s.growth_interval},
                 {"hysteresis", s.hysteresis},
                 {"min_scale", num(s.min_scale)},
                 {"max_scale", num(s.max_scale)}};
  j["data"] = {{"bytes", corpus.size()},
               {"crc32", crc32_hex(crc32(corpus.storage(), static_cast<size_t>(corpus.storage_bytes())))}};
  // A token corpus: "bytes" counts its tokens, and the tokenizer is part of the data.
  if (!corpus.tokenizer().empty()) j["data"]["tokenizer"] = corpus.tokenizer();
  return j;
}

}  // namespace

nlohmann::json json_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

std::string first_difference(const nlohmann::json& saved, const nlohmann::json& now,
                             const std::string& prefix) {
  if (saved.is_object() && now.is_object()) {
    for (const auto& [k, v] : now.items()) {
      if (!saved.contains(k)) return prefix + k + " (not in the checkpoint)";
      const std::string d = first_difference(saved[k], v, prefix + k + ".");
      if (!d.empty()) return d;
    }
    for (const auto& [k, v] : saved.items())
      if (!now.contains(k)) return prefix + k + " (only in the checkpoint)";
    return "";
  }
  if (saved == now) return "";
  std::string key = prefix.empty() ? "value" : prefix.substr(0, prefix.size() - 1);
  return key + ": checkpoint has " + json_excerpt(saved) + ", this run has " + json_excerpt(now);
}

namespace {
// The first difference between the model a checkpoint was made with and this run's, both as
// Model::config_json() (a GptConfig, an encoder's config.json): a name ("name": a preset's or the
// config file's path; "_name_or_path": Hugging Face's) is not the model itself.
std::string model_difference(nlohmann::json saved, nlohmann::json now) {
  for (const char* k : {"name", "_name_or_path"}) {
    saved.erase(k);
    now.erase(k);
  }
  return first_difference(saved, now, "model.");
}
}  // namespace

void CheckpointOptions::validate() const {
  // Named as TrainOptions spells them (opt.checkpoint.keep); the CLI says its flags instead.
  auto bad = [](std::vector<std::string> fields, const std::string& what) {
    throw ArgumentError(std::move(fields), what);
  };
  if (save_every < 0)
    bad({"checkpoint.save_every"}, "checkpoint.save_every must be >= 0, got " + std::to_string(save_every));
  if (keep < 0) bad({"checkpoint.keep"}, "checkpoint.keep must be >= 0, got " + std::to_string(keep));
  if (stop_after < 0)
    bad({"checkpoint.stop_after"}, "checkpoint.stop_after must be >= 0, got " + std::to_string(stop_after));
  if (dir.empty() && save_every > 0)
    bad({"checkpoint.save_every", "checkpoint.dir"}, "checkpoint.save_every needs checkpoint.dir");
  if (dir.empty() && keep > 0)
    bad({"checkpoint.keep", "checkpoint.dir"}, "checkpoint.keep needs checkpoint.dir");
  if (!resume.empty() && !init_from.empty())
    bad({"checkpoint.resume", "checkpoint.init_from"},
        "checkpoint.resume and checkpoint.init_from exclude each other (a checkpoint holds its own weights)");
}

nlohmann::json fp8_run_options(const Fp8Config& c) {
  return {{"recipe", fp8_recipe_name(c.recipe)},
          {"format", fp8_format_name(c.format_or_default())},
          {"amax_history", c.amax_history},
          {"amax_compute", fp8_amax_compute_name(c.amax_compute)},
          {"margin", c.margin},
          {"keep_first_last", c.keep_first_last},
          {"keep", c.keep}};
}

CheckpointHook::CheckpointHook(const RunOptions& opt, nlohmann::json run_options, std::string last_step_words)
    : opt_(opt), run_(std::move(run_options)), last_step_words_(std::move(last_step_words)) {
  opt.checkpoint.validate();
}

TrainingState CheckpointHook::capture(int64_t step, TrainingRun& r) const {
  TrainingState s;
  s.step = step;
  s.precision = std::string(precision_spec(opt_.precision).name);
  s.model = nlohmann::json::parse(r.model().config_json());
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
  s.counters.skips_by_site = r.summary().skips_by_site;
  if (Fp8State* f = r.fp8()) {
    const Fp8State::Snapshot snap = f->snapshot();
    s.fp8.sites = static_cast<int64_t>(f->sites().size());
    s.fp8.amax_history = f->config().amax_history;
    s.fp8.updates = snap.updates;
    const auto tensor = [](const std::vector<float>& v) {
      return Tensor::from_vector(std::vector<double>(v.begin(), v.end()), {static_cast<int64_t>(v.size())},
                                 DType::f32);
    };
    s.fp8.history = tensor(snap.history);
    s.fp8.scale = tensor(snap.scale);
  }
  s.error_feedback = r.carried_error_feedback();  // compressed sums' (train/data_parallel.h), or none
  s.rng = {{"seed", opt_.seed},
           {"data_position", step * opt_.grad_accum},
           {"stochastic_rounding_counter", s.optimizer.steps * store.flat_numel()}};
  return s;
}

bool checkpoint_due(const CheckpointOptions& c, int64_t step, int64_t last, bool interrupted) {
  const bool stop = c.stop_after > 0 && step == c.stop_after && step < last;
  return !c.dir.empty() &&
         (step == last || stop || interrupted || (c.save_every > 0 && step % c.save_every == 0));
}

bool ZeroCheckpointGatherHook::should_stop(TrainingRun& r, const StepRecord& rec) {
  if (checkpoint_due(c_, rec.step, r.config().steps, r.summary().interrupted)) (void)r.optimizer().state();
  return false;  // stop_after is this rank's CheckpointHook's
}

bool CheckpointHook::should_stop(TrainingRun& r, const StepRecord& rec) {
  const int64_t step = rec.step;
  const CheckpointOptions& c = opt_.checkpoint;
  const int64_t last = r.config().steps;
  const bool stop = c.stop_after > 0 && step == c.stop_after && step < last;
  // An interrupted run (InterruptHook latched the signal in on_step_end) saves where it stops.
  if (checkpoint_due(c, step, last, r.summary().interrupted)) {
    std::vector<CheckpointFile> files(2);
    files[0].name = kModelFile;
    files[0].bytes = weights_file(r);
    files[1].name = kStateFile;
    files[1].bytes = encode_training_state(capture(step, r));
    for (CheckpointFile& f : extra_files()) files.push_back(std::move(f));
    nlohmann::ordered_json info;
    info["precision"] = std::string(precision_spec(opt_.precision).name);
    info["model"] = manifest_model(r);
    if (nlohmann::json t = task_state(); !t.is_null()) info["task_state"] = std::move(t);
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

void CheckpointHook::on_run_start(TrainingRun& r) {
  const int64_t start = restore(r);
  prepare_directory(start);
  r.set_start_step(start);
}

void CheckpointHook::prepare_directory(int64_t start) const {
  const std::string& dir = opt_.checkpoint.dir;
  if (dir.empty()) return;
  const auto all = list_checkpoints(dir);
  if (opt_.checkpoint.resume.empty()) {
    if (!all.empty())
      throw ArgumentError({"checkpoint.resume"},
                          "checkpoint directory " + dir + " already holds checkpoints (newest " +
                              all.back().second + "): continue them with checkpoint.resume=" + dir +
                              ", or choose another directory");
    return;
  }
  for (const auto& [step, path] : all) {
    if (step <= start) continue;
    // Newer than where this run continues: skipped as invalid, or a timeline the user chose to
    // leave. Moved out of the way (not deleted), so after a crash --resume finds this run's.
    const std::filesystem::path p(path);
    const std::string base = (p.parent_path() / ("abandoned-" + p.filename().string())).string();
    std::string aside = base;
    for (int k = 1; std::filesystem::exists(aside);
         ++k) {  // appended in parts: GCC 12 warns falsely on a + chain
      aside = base;
      aside += '~';
      aside += std::to_string(k);
    }
    std::error_code ec;
    std::filesystem::rename(path, aside, ec);
    if (ec) throw IoError("cannot move " + path + " to " + aside + ": " + ec.message());
    std::fprintf(stderr,
                 "mixtrain: warning: moved %s to %s: it is newer than step %lld, where this run continues\n",
                 path.c_str(), aside.c_str(), static_cast<long long>(start));
  }
}

int64_t CheckpointHook::restore(TrainingRun& r) {
  const std::string& path = opt_.checkpoint.resume;
  if (path.empty()) {
    start_fresh();
    return 0;
  }
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
    // A checkpoint named directly (step-NNNNNN, or a directory holding checkpoint files) that
    // lacks its manifest is invalid, not "no checkpoint yet": training from step 0 would
    // silently throw its work away.
    namespace fs = std::filesystem;
    const std::string base = fs::path(path).filename().string();
    std::error_code ec;
    const bool named = (base.rfind("step-", 0) == 0 && base.size() > 5 &&
                        base.find_first_not_of("0123456789", 5) == std::string::npos) ||
                       fs::exists(fs::path(path) / kStateFile, ec) ||
                       fs::exists(fs::path(path) / kModelFile, ec);
    if (named)
      throw IoError("checkpoint " + path +
                    " is invalid: no manifest.json (an incomplete or damaged checkpoint)");
    warn("no checkpoint in " + path + " yet; starting from step 0");
    return 0;
  }
  const TrainingState& s = *state;
  const std::string where = "cannot resume from " + found->path + ": ";
  std::string diff = model_difference(s.model, nlohmann::json::parse(r.model().config_json()));
  if (diff.empty()) diff = first_difference(s.run, run_);
  if (!diff.empty()) throw ArgumentError(where + "options differ, " + diff);
  const int64_t last = r.config().steps;
  if (s.step > last)
    throw ArgumentError({"steps"}, where + "it is at step " + std::to_string(s.step) + ", past " +
                                       last_step_words_ + " " + std::to_string(last));

  ParameterStore& store = r.model().params();
  const std::string bad = "checkpoint " + found->path + ": ";
  if (s.params.numel() != store.flat_numel())
    throw IoError(bad + "'params' has " + std::to_string(s.params.numel()) + " elements, the model " +
                  std::to_string(store.flat_numel()));
  try {
    r.optimizer().restore(s.optimizer);
  } catch (const ArgumentError& e) {
    throw IoError(bad + "optimizer state: " + e.what());
  }
  try {
    r.mp().scaler().load_state(s.scaler);
  } catch (const ArgumentError& e) {
    throw IoError(bad + "loss scaler state: " + e.what());
  }
  if (Fp8State* f8 = r.fp8()) {
    if (!s.fp8.present())
      throw IoError(bad + "no fp8 amax histories (tensors 'fp8.amax_history', 'fp8.scale')");
    Fp8State::Snapshot snap;
    snap.updates = s.fp8.updates;
    for (double v : s.fp8.history.to_doubles()) snap.history.push_back(static_cast<float>(v));
    for (double v : s.fp8.scale.to_doubles()) snap.scale.push_back(static_cast<float>(v));
    try {
      f8->restore(snap);
    } catch (const ArgumentError& e) {
      throw IoError(bad + e.what());
    }
  }
  restore_task_state(found->info.contains("task_state") ? found->info["task_state"] : nlohmann::json());
  // Compressed sums' error feedback: the data-parallel hook hands it out to the ranks; one process
  // sends nothing, so there is no rounding left to carry.
  if (r.world_size() > 1)
    r.carried_error_feedback() = s.error_feedback;
  else if (s.error_feedback.defined())
    warn(
        "the checkpoint carries the error feedback of compressed gradient sums (rounding not yet sent "
        "to other ranks); one process has no ranks to send it to and drops it");
  Tensor flat = store.flat_params();  // shares the storage
  flat.copy_from(s.params);
  store.flat_params().storage()->bump_version();  // cached autocast copies are stale
  TrainSummary& sum = r.summary();
  sum.skipped_steps = s.counters.skipped_steps;
  sum.overflows = s.counters.overflows;
  sum.hit_min_scale = s.counters.hit_min_scale;
  sum.final_train_loss = s.counters.last_loss;
  sum.skips_by_site = s.counters.skips_by_site;
  r.bad_in_a_row() = s.counters.bad_in_a_row;
  if (!opt_.quiet) {
    std::printf("resumed from %s at step %lld\n", found->path.c_str(), static_cast<long long>(s.step));
    std::fflush(stdout);
  }
  return s.step;
}

namespace {
// What every checkpoint of the run carries beside its weights: Hugging Face's config.json, so
// transformers' from_pretrained(step-NNNNNN) works as it is (bos/eos from the tokenizer's
// vocab.json), and the tokenizer's files (AutoTokenizer.from_pretrained(step-NNNNNN)). Made once:
// neither changes during the run.
std::vector<CheckpointFile> hf_files(const GptConfig& cfg, std::vector<CheckpointFile> tokenizer_files) {
  std::string_view vocab;
  for (const CheckpointFile& f : tokenizer_files)
    if (f.name == "vocab.json") vocab = {reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size()};
  const std::string hf_config = gpt2_hf_config_json(cfg, vocab);
  std::vector<CheckpointFile> files = {
      {"config.json", std::vector<uint8_t>(hf_config.begin(), hf_config.end())}};
  for (CheckpointFile& f : tokenizer_files) files.push_back(std::move(f));
  return files;
}
}  // namespace

TrainCheckpointing::TrainCheckpointing(const TrainOptions& opt, Gpt& model, int64_t T,
                                       const TextCorpus& corpus, std::vector<CheckpointFile> tokenizer_files)
    : CheckpointHook(opt, run_options(opt, T, corpus), "steps"),
      model_(model),
      cfg_(model.config()),
      extra_files_(hf_files(cfg_, std::move(tokenizer_files))) {}

std::vector<uint8_t> TrainCheckpointing::weights_file(TrainingRun& r) const {
  SafetensorsWriter w = model_safetensors_writer(r.model());
  w.set_metadata("mixtrain_config", gpt_config_to_json(cfg_).dump());
  return w.serialize();
}

std::vector<CheckpointFile> TrainCheckpointing::extra_files() const { return extra_files_; }

nlohmann::json TrainCheckpointing::manifest_model(TrainingRun&) const { return gpt_config_to_json(cfg_); }

void TrainCheckpointing::start_fresh() {
  if (opt_.checkpoint.init_from.empty()) return;
  const std::string from = load_gpt_weights_into(opt_.checkpoint.init_from, model_, warn);
  if (!opt_.quiet) std::printf("initial weights from %s\n", from.c_str());
}

namespace {
// Keeps the whole lines of the JSONL file `path` from its first while keep(line as JSON) says so
// (a line that is not a JSON object with a "step" is not kept, nor a torn last line from a
// killed run), and drops the rest. Only a regular file is cut back (at a symlink's target, the
// link kept); a device or FIFO is written through as it is.
void trim_jsonl(const std::string& path, const std::function<bool(const nlohmann::json&)>& keep) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  const std::string target = std::filesystem::canonical(path, ec).string();
  if (ec) return;
  std::ifstream in(target, std::ios::binary);
  if (!in) return;  // no log yet
  std::string kept, line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: a line torn by a kill
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !keep(j)) break;
    kept += line + "\n";
  }
  write_file_durable(target, kept);
}
}  // namespace

void trim_step_log(const std::string& path, int64_t step) {
  int64_t expected = 1;  // one line per step, 1 .. step
  trim_jsonl(path, [&](const nlohmann::json& j) { return expected <= step && j["step"] == expected++; });
}

void trim_numerics_log(const std::string& path, int64_t step) {
  int64_t last = 1;  // the sampled steps' records, steps never decreasing, up to `step`
  trim_jsonl(path, [&](const nlohmann::json& j) {
    const nlohmann::json& s = j["step"];
    if (!s.is_number_integer() || s.get<int64_t>() < last || s.get<int64_t>() > step) return false;
    last = s.get<int64_t>();
    return true;
  });
}

}  // namespace mixtrain
