// train_state.safetensors: a round trip keeps every field and buffer bit for bit, and corrupt or
// ill-typed state is refused with a one-line IoError naming the file and the field.
#include "checkpoint/training_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/safetensors.h"
#include "models/gpt_config_json.h"

namespace mixtrain {
namespace {

using testing_ckpt::expect_error;

TrainingState sample_state(DType t = DType::f32, bool compensation = false) {
  TrainingState s;
  s.step = 12;
  s.precision = t == DType::f32 ? "16-mixed" : (t == DType::bf16 ? "bf16-true" : "16-true");
  s.model = {{"name", "tiny"}, {"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 16}};
  s.run = {{"lr", 0.001}, {"seed", 7}};
  s.params = Tensor::randn({100}, t, 1);
  s.optimizer.kind = OptimizerKind::adamw;
  s.optimizer.steps = 10;
  s.optimizer.exp_avg = Tensor::randn({100}, t, 2);
  s.optimizer.exp_avg_sq = Tensor::randn({100}, t, 3);
  if (compensation) s.optimizer.compensation = Tensor::randn({100}, t, 4);
  s.scaler = {32768.0, 5, 2, 2, 2};
  s.counters = {2, 2, 0, false, 3.25, {{"transformer.h.0.mlp.c_fc:linear (backward)", 1}, {"(unknown)", 1}}};
  s.rng = {{"seed", 7}, {"data_position", 12}};
  return s;
}

bool same(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(TrainingState, RoundTrip) {
  for (const auto& [t, comp] :
       {std::pair{DType::f32, false}, std::pair{DType::bf16, true}, std::pair{DType::f16, false}}) {
    const TrainingState s = sample_state(t, comp);
    const TrainingState r = decode_training_state(encode_training_state(s), "ts");
    EXPECT_EQ(r.step, 12);
    EXPECT_EQ(r.precision, s.precision);
    EXPECT_EQ(r.model, s.model);
    EXPECT_EQ(r.run, s.run);
    EXPECT_EQ(r.rng, s.rng);
    EXPECT_EQ(r.optimizer.kind, OptimizerKind::adamw);
    EXPECT_EQ(r.optimizer.steps, 10);
    EXPECT_TRUE(same(r.params, s.params));
    EXPECT_TRUE(same(r.optimizer.exp_avg, s.optimizer.exp_avg));
    EXPECT_TRUE(same(r.optimizer.exp_avg_sq, s.optimizer.exp_avg_sq));
    EXPECT_TRUE(same(r.optimizer.compensation, s.optimizer.compensation));
    EXPECT_EQ(r.scaler.scale, 32768.0);
    EXPECT_EQ(r.scaler.growth_tracker, 5);
    EXPECT_EQ(r.scaler.hysteresis_left, 2);
    EXPECT_EQ(r.counters.skipped_steps, 2);
    EXPECT_EQ(r.counters.last_loss, 3.25);
    EXPECT_EQ(r.counters.skips_by_site, s.counters.skips_by_site);
  }
  // Master rounding: 16-bit weights, fp32 moments and masters.
  TrainingState m = sample_state(DType::bf16);
  m.optimizer.exp_avg = Tensor::randn({100}, DType::f32, 2);
  m.optimizer.exp_avg_sq = Tensor::randn({100}, DType::f32, 3);
  m.optimizer.master = Tensor::randn({100}, DType::f32, 5);
  const TrainingState rm = decode_training_state(encode_training_state(m), "ts");
  EXPECT_TRUE(same(rm.params, m.params));
  EXPECT_TRUE(same(rm.optimizer.exp_avg, m.optimizer.exp_avg));
  EXPECT_TRUE(same(rm.optimizer.master, m.optimizer.master));
  m.optimizer.exp_avg = Tensor::randn({100}, DType::bf16, 2);  // 16-bit moments beside masters
  expect_error<IoError>([&] { decode_training_state(encode_training_state(m), "ts"); },
                        {"'optim.exp_avg' has dtype BF16, expected F32 for bf16-true with master weights"});
  TrainingState sgd = sample_state();
  sgd.optimizer = {};
  sgd.optimizer.kind = OptimizerKind::sgd;
  sgd.optimizer.steps = 3;
  sgd.counters.last_loss = NAN;
  TrainingState r = decode_training_state(encode_training_state(sgd), "ts");
  EXPECT_FALSE(r.optimizer.momentum_buffer.defined());
  EXPECT_TRUE(std::isnan(r.counters.last_loss));
  sgd.optimizer.momentum_buffer = Tensor::randn({100}, DType::f32, 9);
  r = decode_training_state(encode_training_state(sgd), "ts");
  EXPECT_TRUE(same(r.optimizer.momentum_buffer, sgd.optimizer.momentum_buffer));
}

// Compressed gradient sums' error feedback: kept bit for bit; the wrong length or dtype, or a
// non-finite value, refused naming the tensor.
TEST(TrainingState, ErrorFeedbackRoundTripAndChecks) {
  TrainingState s = sample_state();
  EXPECT_FALSE(decode_training_state(encode_training_state(s), "ts").error_feedback.defined());
  s.error_feedback = Tensor::randn({100}, DType::f32, 11);
  EXPECT_TRUE(same(decode_training_state(encode_training_state(s), "ts").error_feedback, s.error_feedback));
  s.error_feedback = Tensor::randn({99}, DType::f32, 11);
  expect_error<IoError>([&] { decode_training_state(encode_training_state(s), "ts"); },
                        {"'dist.error_feedback' must be 1-D f32 of 'params' length 100"});
  s.error_feedback = Tensor::randn({100}, DType::bf16, 11);
  expect_error<IoError>([&] { decode_training_state(encode_training_state(s), "ts"); },
                        {"'dist.error_feedback' must be 1-D f32"});
  s.error_feedback = Tensor::zeros({100}, DType::f32);
  s.error_feedback.data<float>()[42] = INFINITY;
  expect_error<IoError>([&] { decode_training_state(encode_training_state(s), "ts"); },
                        {"'dist.error_feedback' holds inf at 42"});
}

// Re-writes an encoded state with its JSON edited and its tensors filtered / replaced.
std::vector<uint8_t> rewrite(
    const std::vector<uint8_t>& bytes, const std::function<void(nlohmann::json&)>& edit_json,
    const std::function<void(SafetensorsWriter&, const SafetensorsFile&)>& tensors = nullptr) {
  const SafetensorsFile f = SafetensorsFile::parse(bytes, "x");
  nlohmann::json j = nlohmann::json::parse(f.metadata().at("mixtrain"));
  edit_json(j);
  SafetensorsWriter w;
  if (tensors)
    tensors(w, f);
  else
    for (const auto& e : f.entries()) w.add(e.name, f.tensor(e));
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  w.set_metadata("mixtrain", j.dump());
  return w.serialize();
}

TEST(TrainingState, StateWithoutSkipsBySiteLoadsAsNone) {
  // Written before the skips by site were kept: the field is absent.
  const std::vector<uint8_t> old = rewrite(encode_training_state(sample_state()),
                                           [](nlohmann::json& j) { j["counters"].erase("skips_by_site"); });
  const TrainingState r = decode_training_state(old, "ts");
  EXPECT_EQ(r.counters.skipped_steps, 2);
  EXPECT_TRUE(r.counters.skips_by_site.empty());
}

TEST(TrainingState, RefusesCorruptState) {
  const std::vector<uint8_t> good = encode_training_state(sample_state());
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* needle;
  };
  const Case cases[] = {
      {"step a string", [](nlohmann::json& j) { j["step"] = "12"; }, "'step' must be a non-negative integer"},
      {"step negative", [](nlohmann::json& j) { j["step"] = -1; }, "'step' must be a non-negative integer"},
      {"step a float", [](nlohmann::json& j) { j["step"] = 1.5; }, "'step' must be a non-negative integer"},
      {"step missing", [](nlohmann::json& j) { j.erase("step"); }, "'step' is missing"},
      {"unknown precision", [](nlohmann::json& j) { j["precision"] = "8-mixed"; }, "not a precision mode"},
      {"precision a number", [](nlohmann::json& j) { j["precision"] = 16; }, "'precision' must be a string"},
      {"model not an object", [](nlohmann::json& j) { j["model"] = 3; }, "must be a JSON object"},
      {"model an array",
       [](nlohmann::json& j) {
         j["model"] = nlohmann::json::array({1, 2});
       },
       "must be a JSON object"},
      {"model missing", [](nlohmann::json& j) { j.erase("model"); }, "'model' is missing"},
      {"optimizer kind", [](nlohmann::json& j) { j["optimizer"]["kind"] = "lion"; }, "must be adamw or sgd"},
      {"optimizer steps past step", [](nlohmann::json& j) { j["optimizer"]["steps"] = 13; }, "exceeds step"},
      {"scale zero", [](nlohmann::json& j) { j["scaler"]["scale"] = 0; }, "positive finite fp32"},
      {"scale not fp32", [](nlohmann::json& j) { j["scaler"]["scale"] = 0.1; }, "positive finite fp32"},
      {"scale a string", [](nlohmann::json& j) { j["scaler"]["scale"] = "big"; },
       "'scaler.scale' must be a number"},
      {"hysteresis zero", [](nlohmann::json& j) { j["scaler"]["hysteresis_left"] = 0; }, "at least 1"},
      {"scaler missing", [](nlohmann::json& j) { j.erase("scaler"); }, "'scaler' is missing"},
      {"counter a bool", [](nlohmann::json& j) { j["counters"]["overflows"] = true; },
       "'counters.overflows'"},
      {"flag a number", [](nlohmann::json& j) { j["counters"]["hit_min_scale"] = 1; }, "true or false"},
      {"counters past step", [](nlohmann::json& j) { j["counters"]["skipped_steps"] = 99; }, "more steps"},
      {"skips by site an array",
       [](nlohmann::json& j) { j["counters"]["skips_by_site"] = nlohmann::json::array(); },
       "'counters.skips_by_site' must be an object"},
      {"skips by site negative", [](nlohmann::json& j) { j["counters"]["skips_by_site"]["(loss)"] = -1; },
       "'counters.skips_by_site.(loss)' must be a non-negative integer"},
      {"skips by site a string", [](nlohmann::json& j) { j["counters"]["skips_by_site"]["(loss)"] = "1"; },
       "'counters.skips_by_site.(loss)' must be a non-negative integer"},
      {"skips by site past skipped_steps",
       [](nlohmann::json& j) { j["counters"]["skips_by_site"]["(loss)"] = 1; },
       "adds up to more skips than 'counters.skipped_steps'"},
      {"run not an object", [](nlohmann::json& j) { j["run"] = nlohmann::json::array(); },
       "'run' must be an object"},
      {"state an array", [](nlohmann::json& j) { j = nlohmann::json::array(); }, "must be an object"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    expect_error<IoError>([&] { decode_training_state(rewrite(good, c.edit), "ts.safetensors"); },
                          {"training state ts.safetensors", c.needle});
  }
  // Tensor problems: every tensor copied, one of them changed or dropped, or one added.
  struct TensorCase {
    const char* what;
    std::string name;                           // the tensor to change ("": none)
    std::function<Tensor(const Tensor&)> edit;  // its new value (empty: dropped)
    std::string extra;                          // a (100) f32 tensor added under this name ("": none)
    const char* needle;
  };
  const TensorCase tensor_cases[] = {
      {"moment missing", "optim.exp_avg_sq", nullptr, "", "'optim.exp_avg_sq' is missing"},
      {"unexpected tensor", "", nullptr, "optim.extra", "unexpected tensor 'optim.extra'"},
      {"wrong dtype", "params", [](const Tensor& t) { return t.to(DType::bf16); }, "",
       "'params' has dtype BF16, expected F32 for 16-mixed"},
      {"wrong size", "optim.exp_avg", [](const Tensor&) { return Tensor::zeros({99}, DType::f32); }, "",
       "'optim.exp_avg' has 99 elements"},
      {"not 1-D", "params",
       [](const Tensor& t) {
         return t.reshape({10, 10});
       },
       "", "'params' must be 1-D"},
      {"compensation in fp32", "", nullptr, "optim.compensation",
       "compensation buffer only exists with 16-bit"},
      {"master in fp32", "", nullptr, "optim.master", "fp32 master weights only exist with 16-bit"},
  };
  auto keep = [](nlohmann::json&) {};
  for (const auto& c : tensor_cases) {
    SCOPED_TRACE(c.what);
    expect_error<IoError>(
        [&] {
          decode_training_state(rewrite(good, keep,
                                        [&](SafetensorsWriter& w, const SafetensorsFile& f) {
                                          for (const auto& e : f.entries()) {
                                            if (e.name != c.name)
                                              w.add(e.name, f.tensor(e));
                                            else if (c.edit)
                                              w.add(e.name, c.edit(f.tensor(e)));
                                          }
                                          if (!c.extra.empty())
                                            w.add(c.extra, Tensor::zeros({100}, DType::f32));
                                        }),
                                "ts");
        },
        {c.needle});
  }
  // Metadata problems.
  SafetensorsWriter w;
  w.add("params", Tensor::zeros({4}, DType::f32));
  expect_error<IoError>([&] { decode_training_state(w.serialize(), "ts"); },
                        {"not a mixtrain training state"});
  w.set_metadata("format", "mixtrain-train-state");
  w.set_metadata("version", "9");
  expect_error<IoError>([&] { decode_training_state(w.serialize(), "ts"); }, {"unsupported version '9'"});
  w.set_metadata("version", "1");
  expect_error<IoError>([&] { decode_training_state(w.serialize(), "ts"); },
                        {"'mixtrain' metadata entry is missing"});
  w.set_metadata("mixtrain", "{\"step\": ");
  expect_error<IoError>([&] { decode_training_state(w.serialize(), "ts"); }, {"not valid JSON"});
  // Any truncation of the file.
  for (size_t n = 0; n < good.size(); n += 97)
    EXPECT_THROW(decode_training_state(
                     std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)), "ts"),
                 IoError);
}

}  // namespace
}  // namespace mixtrain
