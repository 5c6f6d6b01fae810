// train_state.safetensors: encode, and decode with every field checked.
#include "checkpoint/training_state.h"

#include <algorithm>
#include <cmath>

#include "checkpoint/safetensors.h"
#include "core/file_io.h"
#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/amp/precision.h"
#include "mixtrain/core/error.h"
#include "models/gpt_config_json.h"

namespace mixtrain {
namespace {

constexpr const char* kStateFormat = "mixtrain-train-state";
constexpr const char* kStateVersion = "1";

// Field access that names the file and the field in every failure.
class Fields {
 public:
  Fields(const nlohmann::json& j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_.empty() ? "state" : path_, "must be an object");
  }
  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw IoError("training state " + file_ + ": '" + field + "' " + problem);
  }
  std::string name(const std::string& key) const {  // keys may come from the file (skips_by_site)
    return path_.empty() ? printable(key) : path_ + "." + printable(key);
  }
  const nlohmann::json& at(const std::string& key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) fail(name(key), "is missing");
    return *it;
  }
  int64_t count(const std::string& key) const {
    const auto& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) ||
        v.get<int64_t>() < 0)
      fail(name(key), "must be a non-negative integer, got " + json_excerpt(v, 40));
    return v.get<int64_t>();
  }
  bool flag(const std::string& key) const {
    const auto& v = at(key);
    if (!v.is_boolean()) fail(name(key), "must be true or false");
    return v.get<bool>();
  }
  double number(const std::string& key) const {  // a number, or null for NaN (JSON has no NaN)
    const auto& v = at(key);
    if (v.is_null()) return NAN;
    if (!v.is_number()) fail(name(key), "must be a number");
    return v.get<double>();
  }
  std::string text(const std::string& key) const {
    const auto& v = at(key);
    if (!v.is_string()) fail(name(key), "must be a string");
    return v.get<std::string>();
  }
  Fields object(const std::string& key) const { return Fields(at(key), file_, name(key)); }
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& j_;
  std::string file_, path_;
};

}  // namespace

std::vector<uint8_t> encode_training_state(const TrainingState& s) {
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["precision"] = s.precision;
  j["model"] = s.model;
  j["run"] = s.run;
  j["optimizer"] = {{"kind", std::string(optimizer_kind_name(s.optimizer.kind))},
                    {"steps", s.optimizer.steps}};
  j["scaler"] = {{"scale", s.scaler.scale},
                 {"growth_tracker", s.scaler.growth_tracker},
                 {"hysteresis_left", s.scaler.hysteresis_left},
                 {"overflows", s.scaler.overflows},
                 {"skipped_steps", s.scaler.skipped_steps}};
  nlohmann::ordered_json c;
  c["skipped_steps"] = s.counters.skipped_steps;
  c["overflows"] = s.counters.overflows;
  c["bad_in_a_row"] = s.counters.bad_in_a_row;
  c["hit_min_scale"] = s.counters.hit_min_scale;
  if (std::isfinite(s.counters.last_loss))
    c["last_loss"] = s.counters.last_loss;
  else
    c["last_loss"] = nullptr;
  c["skips_by_site"] = s.counters.skips_by_site;
  j["counters"] = c;
  j["rng"] = s.rng;
  if (s.fp8.present())
    j["fp8"] = {{"sites", s.fp8.sites}, {"amax_history", s.fp8.amax_history}, {"updates", s.fp8.updates}};

  if (s.optimizer.state_precision != StatePrecision::fp32)  // absent: fp32 (states from before the option)
    j["optimizer"]["state"] = std::string(state_precision_name(s.optimizer.state_precision));

  SafetensorsWriter w;
  w.add("params", s.params);
  // int8 state: each moment's codes (i8 bit patterns) under its usual name, its block absmax and
  // fp32 fallback (kernels/state_kernels.h) beside it.
  const bool q = s.optimizer.state_precision == StatePrecision::int8;
  auto add_parts = [&](const std::string& name, const QuantizedMomentParts& p) {
    if (!q) return;
    w.add(name + ".absmax", p.absmax);
    w.add(name + ".fallback", p.fallback);
  };
  if (s.optimizer.kind == OptimizerKind::adamw) {
    w.add("optim.exp_avg", s.optimizer.exp_avg);
    w.add("optim.exp_avg_sq", s.optimizer.exp_avg_sq);
    add_parts("optim.exp_avg", s.optimizer.exp_avg_q);
    add_parts("optim.exp_avg_sq", s.optimizer.exp_avg_sq_q);
  } else if (s.optimizer.momentum_buffer.defined()) {
    w.add("optim.momentum_buffer", s.optimizer.momentum_buffer);
    add_parts("optim.momentum_buffer", s.optimizer.momentum_q);
  }
  if (s.optimizer.compensation.defined()) w.add("optim.compensation", s.optimizer.compensation);
  if (s.optimizer.master.defined()) w.add("optim.master", s.optimizer.master);
  if (s.fp8.present()) {
    w.add("fp8.amax_history", s.fp8.history);
    w.add("fp8.scale", s.fp8.scale);
  }
  if (s.error_feedback.defined()) w.add("dist.error_feedback", s.error_feedback);
  w.set_metadata("format", kStateFormat);
  w.set_metadata("version", kStateVersion);
  w.set_metadata("mixtrain", j.dump());
  return w.serialize();
}

TrainingState decode_training_state(std::vector<uint8_t> bytes, const std::string& name) {
  const SafetensorsFile f = SafetensorsFile::parse(std::move(bytes), name);
  auto fail = [&](const std::string& problem) -> void {
    throw IoError("training state " + name + ": " + problem);
  };
  const auto& meta = f.metadata();
  const auto fmt = meta.find("format");
  if (fmt == meta.end() || fmt->second != kStateFormat)
    fail("not a mixtrain training state (metadata 'format')");
  const auto ver = meta.find("version");
  if (ver == meta.end() || ver->second != kStateVersion)
    fail("unsupported version '" + printable(ver == meta.end() ? "" : ver->second) + "' (this build reads " +
         kStateVersion + ")");
  const auto body = meta.find("mixtrain");
  if (body == meta.end()) fail("the 'mixtrain' metadata entry is missing");
  const nlohmann::json j =
      parse_untrusted_json(body->second, "training state " + name + ": the 'mixtrain' metadata");
  const Fields top(j, name, "");

  TrainingState s;
  s.step = top.count("step");
  s.precision = top.text("precision");
  PrecisionMode mode{};
  try {
    mode = parse_precision(s.precision);
  } catch (const ArgumentError&) {
    top.fail("precision", "is not a precision mode: '" + printable(s.precision) + "'");
  }
  if (!top.at("model").is_object()) top.fail("model", "must be a JSON object");
  s.model = top.at("model");  // compared with the resuming run's model (train/checkpointing.h)
  if (!top.at("run").is_object()) top.fail("run", "must be an object");
  s.run = top.at("run");
  if (!top.at("rng").is_object()) top.fail("rng", "must be an object");
  s.rng = top.at("rng");

  const Fields opt = top.object("optimizer");
  const std::string kind = opt.text("kind");
  if (kind != "adamw" && kind != "sgd")
    opt.fail("optimizer.kind", "must be adamw or sgd, got '" + printable(kind) + "'");
  s.optimizer.kind = parse_optimizer_kind(kind);
  s.optimizer.steps = opt.count("steps");
  if (opt.json().contains("state")) {
    const std::string st = opt.text("state");
    try {
      s.optimizer.state_precision = parse_state_precision(st);
    } catch (const ArgumentError&) {
      opt.fail("optimizer.state", "must be fp32, bf16 or int8, got '" + printable(st) + "'");
    }
  }
  if (s.optimizer.steps > s.step) opt.fail("optimizer.steps", "exceeds step");

  const Fields sc = top.object("scaler");
  s.scaler.scale = sc.number("scale");
  if (!(s.scaler.scale > 0) || !std::isfinite(s.scaler.scale) ||
      double(float(s.scaler.scale)) != s.scaler.scale)
    sc.fail("scaler.scale", "must be a positive finite fp32 value");
  s.scaler.growth_tracker = sc.count("growth_tracker");
  s.scaler.hysteresis_left = sc.count("hysteresis_left");
  if (s.scaler.hysteresis_left < 1) sc.fail("scaler.hysteresis_left", "must be at least 1");
  s.scaler.overflows = sc.count("overflows");
  s.scaler.skipped_steps = sc.count("skipped_steps");

  const Fields ct = top.object("counters");
  s.counters.skipped_steps = ct.count("skipped_steps");
  s.counters.overflows = ct.count("overflows");
  s.counters.bad_in_a_row = ct.count("bad_in_a_row");
  s.counters.hit_min_scale = ct.flag("hit_min_scale");
  s.counters.last_loss = ct.number("last_loss");
  if (s.counters.skipped_steps > s.step || s.counters.overflows > s.step || s.counters.bad_in_a_row > s.step)
    ct.fail("counters", "count more steps than 'step'");
  if (ct.json().contains("skips_by_site")) {  // absent in states written before it was kept
    const Fields sites = ct.object("skips_by_site");
    int64_t left = s.counters.skipped_steps;
    for (const auto& item : sites.json().items()) {
      const std::string& site = item.key();
      const int64_t n = sites.count(site);
      if (n > left) sites.fail(sites.name(site), "adds up to more skips than 'counters.skipped_steps'");
      left -= n;
      s.counters.skips_by_site[site] = n;
    }
  }

  // fp8-mixed's histories and scales: their own lengths, f32; amaxes non-negative (inf is an amax),
  // scales positive and finite.
  size_t fp8_tensors = 0;
  if (j.contains("fp8")) {
    if (mode != PrecisionMode::mixed_fp8) top.fail("fp8", "only exists in fp8-mixed");
    const Fields f8 = top.object("fp8");
    s.fp8.sites = f8.count("sites");
    s.fp8.amax_history = f8.count("amax_history");
    s.fp8.updates = f8.count("updates");
    if (s.fp8.amax_history < 1 || s.fp8.amax_history > (int64_t{1} << 20) || s.fp8.sites > (int64_t{1} << 20))
      f8.fail("fp8", "sites or amax_history out of range");
    const auto take8 = [&](const std::string& tname, int64_t n) {
      const SafetensorsEntry* e = f.find(tname);
      if (!e) fail("tensor '" + tname + "' is missing");
      DType t{};
      if (!dtype_from_safetensors(e->dtype, t) || t != DType::f32 || e->shape.size() != 1 || e->shape[0] != n)
        fail("tensor '" + tname + "' must be 1-D f32 of " + std::to_string(n) + " elements");
      return f.tensor(*e, MemCategory::optimizer_state);
    };
    s.fp8.history = take8("fp8.amax_history", s.fp8.sites * 3 * s.fp8.amax_history);
    s.fp8.scale = take8("fp8.scale", s.fp8.sites * 3);
    for (double v : s.fp8.history.to_doubles())
      if (!(v >= 0)) fail("tensor 'fp8.amax_history' holds " + std::to_string(v) + " (an amax is >= 0)");
    for (double v : s.fp8.scale.to_doubles())
      if (!(v > 0) || !std::isfinite(v))
        fail("tensor 'fp8.scale' holds " + std::to_string(v) + " (positive, finite)");
    fp8_tensors = 2;
  }

  // Tensors: exactly the expected set, 1-D, one length, the precision's parameter dtype.
  const DType want = precision_spec(mode).param_dtype;
  int64_t length = -1;
  // Master rounding (16-bit parameters, optim/master_weights.h): fp32 masters and fp32 moments.
  const bool master = f.find("optim.master") != nullptr;
  if (master && !is_low_precision(want)) fail("fp32 master weights only exist with 16-bit parameters");
  auto take = [&](const std::string& tensor_name, bool required, DType wanted) -> Tensor {
    const SafetensorsEntry* e = f.find(tensor_name);
    if (!e) {
      if (required) fail("tensor '" + tensor_name + "' is missing");
      return Tensor();
    }
    DType t{};
    if (!dtype_from_safetensors(e->dtype, t) || t != wanted)
      fail("tensor '" + tensor_name + "' has dtype " + e->dtype + ", expected " +
           safetensors_dtype_name(wanted) + " for " + s.precision + (master ? " with master weights" : ""));
    if (e->shape.size() != 1) fail("tensor '" + tensor_name + "' must be 1-D");
    if (length >= 0 && e->shape[0] != length)
      fail("tensor '" + tensor_name + "' has " + std::to_string(e->shape[0]) + " elements, 'params' has " +
           std::to_string(length));
    length = e->shape[0];
    const MemCategory category = tensor_name == "params"         ? MemCategory::parameters
                                 : tensor_name == "optim.master" ? MemCategory::master_weights
                                                                 : MemCategory::optimizer_state;
    return f.tensor(*e, category);
  };
  const StatePrecision sp = s.optimizer.state_precision;
  if (sp != StatePrecision::fp32 && want != DType::f32 && !master)
    fail(std::string(state_precision_name(sp)) +
         " optimizer state only exists with fp32 parameters or masters");
  const DType state = sp == StatePrecision::bf16   ? DType::bf16
                      : sp == StatePrecision::int8 ? DType::i8
                      : master                     ? DType::f32
                                                   : want;
  s.params = take("params", true, want);
  size_t expected = 1 + fp8_tensors;
  // An int8 moment's absmax and fallback: 1-D f32 of any length (the optimizer's restore checks
  // them against the model's layout).
  std::vector<std::string> parts;
  auto take_parts = [&](const std::string& name, QuantizedMomentParts& p) {
    if (sp != StatePrecision::int8) return;
    for (auto [suffix, t] : {std::pair{".absmax", &p.absmax}, std::pair{".fallback", &p.fallback}}) {
      const std::string tname = name + suffix;
      const SafetensorsEntry* e = f.find(tname);
      if (!e) fail("tensor '" + tname + "' is missing (int8 optimizer state)");
      DType dt{};
      if (!dtype_from_safetensors(e->dtype, dt) || dt != DType::f32 || e->shape.size() != 1)
        fail("tensor '" + tname + "' must be 1-D f32");
      *t = f.tensor(*e, MemCategory::optimizer_state);
      parts.push_back(tname);
      ++expected;
    }
  };
  if (s.optimizer.kind == OptimizerKind::adamw) {
    s.optimizer.exp_avg = take("optim.exp_avg", true, state);
    s.optimizer.exp_avg_sq = take("optim.exp_avg_sq", true, state);
    expected += 2;
    take_parts("optim.exp_avg", s.optimizer.exp_avg_q);
    take_parts("optim.exp_avg_sq", s.optimizer.exp_avg_sq_q);
  } else {
    s.optimizer.momentum_buffer = take("optim.momentum_buffer", false, state);
    expected += s.optimizer.momentum_buffer.defined();
    if (s.optimizer.momentum_buffer.defined()) take_parts("optim.momentum_buffer", s.optimizer.momentum_q);
  }
  s.optimizer.compensation = take("optim.compensation", false, want);
  expected += s.optimizer.compensation.defined();
  s.optimizer.master = take("optim.master", false, DType::f32);
  expected += s.optimizer.master.defined();
  // Compressed sums' error feedback: f32, the parameters' length, finite (a non-finite block keeps
  // its residual, so a finite one stays finite).
  if (const SafetensorsEntry* e = f.find("dist.error_feedback")) {
    DType dt{};
    if (!dtype_from_safetensors(e->dtype, dt) || dt != DType::f32 || e->shape.size() != 1 ||
        e->shape[0] != s.params.numel())
      fail("tensor 'dist.error_feedback' must be 1-D f32 of 'params' length " +
           std::to_string(s.params.numel()));
    s.error_feedback = f.tensor(*e, MemCategory::gradients);
    const float* r = s.error_feedback.data<float>();
    for (int64_t i = 0; i < s.error_feedback.numel(); ++i)
      if (!std::isfinite(r[i]))
        fail("tensor 'dist.error_feedback' holds " + std::to_string(r[i]) + " at " + std::to_string(i) +
             " (finite values only)");
    ++expected;
  }
  if (f.entries().size() != expected) {
    for (const auto& e : f.entries())
      if (e.name != "params" && e.name != "optim.exp_avg" && e.name != "optim.exp_avg_sq" &&
          e.name != "optim.momentum_buffer" && e.name != "optim.compensation" && e.name != "optim.master" &&
          std::find(parts.begin(), parts.end(), e.name) == parts.end() && e.name != "dist.error_feedback" &&
          (fp8_tensors == 0 || (e.name != "fp8.amax_history" && e.name != "fp8.scale")))
        fail("unexpected tensor '" + printable(e.name) + "'");
    fail("tensors do not match optimizer '" + std::string(optimizer_kind_name(s.optimizer.kind)) + "'");
  }
  if (s.optimizer.compensation.defined() && !is_low_precision(want))
    fail("a compensation buffer only exists with 16-bit parameters");
  if (s.optimizer.compensation.defined() && master)
    fail("a compensation buffer and master weights exclude each other");
  return s;
}

}  // namespace mixtrain
