// Shared by the tests that check mixtrain's GPT against the PyTorch fixture
// (tools/make_gpt_fixture.py -> tests/fixtures/gpt_tiny.mtfx): the model config, the weights and
// the batch stored in it.
#pragma once
#include <gtest/gtest.h>

#include "fixtures/fixture.h"
#include "mixtrain/models/gpt.h"

namespace mixtrain::test {

inline const char* kGptFixture = MIXTRAIN_SOURCE_DIR "/tests/fixtures/gpt_tiny.mtfx";

inline GptConfig fixture_config(const Fixture& fx) {
  const auto& c = fx.header.at("config");
  GptConfig cfg;
  cfg.vocab_size = c.at("vocab_size").get<int64_t>();
  cfg.block_size = c.at("block_size").get<int64_t>();
  cfg.n_layer = c.at("n_layer").get<int64_t>();
  cfg.n_head = c.at("n_head").get<int64_t>();
  cfg.n_embd = c.at("n_embd").get<int64_t>();
  return cfg;
}

// Copies the fixture's tensors named prefix + parameter name into the model's parameters.
inline void load_weights(Gpt& model, const Fixture& fx, const std::string& prefix = "") {
  for (size_t i = 0; i < model.params().size(); ++i) {
    const auto& info = model.params().infos()[i];
    const auto& v = fx.f32(prefix + info.name);
    ASSERT_EQ(static_cast<int64_t>(v.size()), info.numel) << info.name;
    model.params().param(i).copy_from(Tensor::from_floats(v, info.shape, DType::f32));
  }
}

// The fixture's batch: idx and targets (B, T) i32.
inline std::pair<Tensor, Tensor> fixture_batch(const Fixture& fx) {
  const auto& shape = fx.at("idx").shape;
  return {Tensor::from_ints(fx.i32("idx"), {shape[0], shape[1]}),
          Tensor::from_ints(fx.i32("targets"), {shape[0], shape[1]})};
}

}  // namespace mixtrain::test
