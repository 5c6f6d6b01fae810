// GPT weights in safetensors: our files round-trip bit for bit in Hugging Face's GPT-2 layout,
// Hugging Face style files (no prefix, tied lm_head, mask buffers) load, and a file that does not
// fit the model is refused with a one-line error, leaving the model unchanged.
#include "checkpoint/gpt_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_test_util.h"
#include "mixtrain/checkpoint/load_model.h"

namespace mixtrain {
namespace {

using testing_ckpt::expect_error;

GptConfig tiny() {
  GptConfig c;
  c.name = "tiny";
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 16;
  return c;
}

bool same_params(const Gpt& a, const Gpt& b) {
  const Tensor& x = a.params().flat_params();
  const Tensor& y = b.params().flat_params();
  return x.dtype() == y.dtype() && x.numel() == y.numel() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

SafetensorsFile reparse(const SafetensorsWriter& w, const std::string& name = "w.safetensors") {
  return SafetensorsFile::parse(w.serialize(), name);
}

TEST(GptWeights, RoundTripBitExactInEveryParamDtype) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Gpt a(tiny(), 1, t, t), b(tiny(), 2, t, t);
    ASSERT_FALSE(same_params(a, b));
    load_gpt_safetensors(reparse(gpt_safetensors_writer(a)), b);
    EXPECT_TRUE(same_params(a, b)) << dtype_name(t);
  }
}

TEST(GptWeights, HuggingFaceLayout) {
  Gpt a(tiny(), 1);
  const SafetensorsFile f = reparse(gpt_safetensors_writer(a));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorsEntry* attn = f.find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->shape, (std::vector<int64_t>{16, 48}));  // Conv1D (in, out); ours is (out, in)
  EXPECT_EQ(f.find("transformer.h.1.mlp.c_fc.weight")->shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(f.find("transformer.h.1.mlp.c_proj.weight")->shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(f.find("transformer.wte.weight")->shape, (std::vector<int64_t>{256, 16}));
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  // Element (i, j) of the file's c_attn is element (j, i) of ours.
  const Tensor ours = a.params().param("transformer.h.0.attn.c_attn.weight");
  const Tensor theirs = f.tensor(*attn);
  EXPECT_EQ(theirs.at({3, 40}), ours.at({40, 3}));
  EXPECT_EQ(theirs.at({15, 0}), ours.at({0, 15}));
}

// A GPT2Model-style file: no "transformer." prefix, attn.bias mask buffers, a tied lm_head,
// fp32 values loaded into a bf16 model (rounded to nearest).
TEST(GptWeights, LoadsHuggingFaceStyleFiles) {
  Gpt a(tiny(), 1);
  SafetensorsWriter w;
  const ParameterStore& s = a.params();
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string& n = s.infos()[i].name;
    const Tensor p = s.param(i);
    w.add(n.substr(std::strlen("transformer.")), is_hf_conv1d_weight(n) ? p.transpose(0, 1) : p);
  }
  w.add("h.0.attn.bias", Tensor::zeros({1, 1, 16, 16}, DType::f32));
  w.add("h.1.attn.masked_bias", Tensor::zeros({}, DType::f32));
  w.add("lm_head.weight", s.param("transformer.wte.weight"));
  const SafetensorsFile f = reparse(w);
  Gpt b(tiny(), 2);
  load_gpt_safetensors(f, b);
  EXPECT_TRUE(same_params(a, b));
  Gpt c(tiny(), 3, DType::bf16, DType::bf16);
  load_gpt_safetensors(f, c);
  EXPECT_EQ(c.params().flat_params().to_floats(), a.params().flat_params().to(DType::bf16).to_floats());
  const GptConfig inferred = infer_gpt_config(f, 2);
  EXPECT_EQ(inferred.n_layer, 2);
  EXPECT_EQ(inferred.n_embd, 16);
  EXPECT_EQ(inferred.block_size, 16);
  EXPECT_EQ(inferred.vocab_size, 256);
}

// Builds a file from our model's tensors with one change made by `edit`.
template <typename Edit>
SafetensorsFile edited(const Gpt& a, Edit edit) {
  SafetensorsWriter w;
  const ParameterStore& s = a.params();
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string& n = s.infos()[i].name;
    Tensor t = is_hf_conv1d_weight(n) ? s.param(i).transpose(0, 1) : s.param(i);
    std::string name = n;
    if (edit(name, t)) w.add(name, t);
  }
  return reparse(w, "bad.safetensors");
}

TEST(GptWeights, RefusesFilesThatDoNotFit) {
  Gpt a(tiny(), 1);
  Gpt b(tiny(), 2);
  const Gpt b_before(tiny(), 2);
  const std::string attn = "transformer.h.0.attn.c_attn.weight";
  // Conv1D weight in our (out, in) layout instead of transposed.
  expect_error<ShapeError>(
      [&] {
        load_gpt_safetensors(edited(a,
                                    [&](std::string& n, Tensor& t) {
                                      if (n == attn) t = a.params().param(attn);
                                      return true;
                                    }),
                             b);
      },
      {"bad.safetensors", attn, "(48, 16)", "expected (16, 48)"});
  expect_error<IoError>(
      [&] { load_gpt_safetensors(edited(a, [&](std::string& n, Tensor&) { return n != attn; }), b); },
      {"bad.safetensors", "missing tensor", attn});
  expect_error<DTypeError>(
      [&] {
        load_gpt_safetensors(edited(a,
                                    [&](std::string& n, Tensor& t) {
                                      if (n == "transformer.ln_f.bias")
                                        t = Tensor::zeros(t.shape(), DType::i32);
                                      return true;
                                    }),
                             b);
      },
      {"bad.safetensors", "ln_f.bias", "I32"});
  expect_error<IoError>(
      [&] {
        load_gpt_safetensors(edited(a,
                                    [&](std::string& n, Tensor&) {
                                      if (n == "transformer.ln_f.bias") n = "transformer.ln_g.bias";
                                      return true;
                                    }),
                             b);
      },
      {"bad.safetensors", "missing tensor 'transformer.ln_f.bias'"});
  expect_error<IoError>(
      [&] {
        SafetensorsWriter w = gpt_safetensors_writer(a);
        w.add("transformer.h.9.mlp.c_fc.weight", Tensor::zeros({1}, DType::f32));
        load_gpt_safetensors(reparse(w, "bad.safetensors"), b);
      },
      {"bad.safetensors", "unexpected tensor 'transformer.h.9.mlp.c_fc.weight'"});
  expect_error<IoError>(
      [&] {
        SafetensorsWriter w = gpt_safetensors_writer(a);
        w.add("ln_f.bias", a.params().param("transformer.ln_f.bias"));
        load_gpt_safetensors(reparse(w, "bad.safetensors"), b);
      },
      {"bad.safetensors", "both with and without"});
  expect_error<IoError>(
      [&] {
        SafetensorsWriter w = gpt_safetensors_writer(a);
        w.add("lm_head.weight", Tensor::zeros({256, 16}, DType::f32));
        load_gpt_safetensors(reparse(w, "bad.safetensors"), b);
      },
      {"bad.safetensors", "lm_head.weight differs from wte"});
  // A model of another size.
  GptConfig wide = tiny();
  wide.n_embd = 32;
  Gpt big(wide, 1);
  expect_error<ShapeError>(
      [&] { load_gpt_safetensors(reparse(gpt_safetensors_writer(big), "bad.safetensors"), b); },
      {"bad.safetensors", "expected"});
  EXPECT_TRUE(same_params(b, b_before)) << "a refused file must leave the model unchanged";
}

// A checkpoint's config.json is Hugging Face's GPT2Config, and it reads back as the same GptConfig.
TEST(GptWeights, HuggingFaceConfigJsonDescribesTheModel) {
  GptConfig c = GptConfig::preset("gpt-nano");
  c.ln_eps = 1e-6f;
  c.dropout = 0.1f;
  const std::string text = gpt2_hf_config_json(c);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("model_type"), "gpt2");
  EXPECT_EQ(j.at("architectures")[0], "GPT2LMHeadModel");
  EXPECT_EQ(j.at("activation_function"), "gelu_new");
  EXPECT_EQ(j.at("n_positions"), 128);
  EXPECT_TRUE(j.at("tie_word_embeddings").get<bool>());
  EXPECT_FLOAT_EQ(j.at("attn_pdrop").get<float>(), 0.1f);
  const GptConfig back = gpt_config_from_hf_json(text, "config.json");
  EXPECT_EQ(back.n_layer, c.n_layer);
  EXPECT_EQ(back.n_head, c.n_head);
  EXPECT_EQ(back.n_embd, c.n_embd);
  EXPECT_EQ(back.block_size, c.block_size);
  EXPECT_EQ(back.vocab_size, c.vocab_size);
  EXPECT_FLOAT_EQ(back.ln_eps, 1e-6f);
}

}  // namespace
}  // namespace mixtrain
