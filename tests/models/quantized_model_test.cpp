// Quantized inference models (train/quantize.h, tensor/quantized.h): the parameter store's
// quantized layout; quantize_model's codes are quantize_rows' of the fp32 weights; a quantized
// linear layer is the composition of the quantization ops exactly; a quantized classifier and GPT
// stay close to their fp32 logits in every scheme; saved and reloaded, the same codes and logits
// bit for bit, in compressed-tensors' layout; hostile quantized files fail with one-line errors;
// `quantize_model_dir` never overwrites and leaves nothing half-written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "encoder_fixture_util.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/quantize.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/tensor/memory.h"
#include "mixtrain/train/quantize.h"
#include "models/encoder_model.h"

using namespace mixtrain;
namespace fs = std::filesystem;
using test::kEncoderFixtures;

namespace {

const QuantScheme kSchemes[] = {QuantScheme::int8_dynamic, QuantScheme::int8_weight, QuantScheme::fp8};

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(MIXTRAIN_BINARY_DIR) / "quantized_model_test" / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d;
}

std::unique_ptr<Model> bert_tiny(const test::Fixture& fx) {
  return load_encoder_classifier(kEncoderFixtures + "bert_tiny", test::encoder_fixture_options(fx));
}

std::vector<float> logits_of(Model& m, const Batch& b, bool bf16) {
  const autograd::NoGradGuard ng;
  const AutocastScope ac(bf16, DType::bf16);
  return m.forward_batch(b, false, 0).logits.value().to_floats();
}

TEST(QuantizedStore, QuantizedParametersLeaveTheArenaForCodesAndScales) {
  ParameterStore s;
  s.declare("w", {4, 8}, true);
  s.declare("b", {4}, false);
  s.declare("e", {3, 8}, true);
  QuantizedLayout q;
  q.scheme = QuantScheme::int8_dynamic;
  q.names = {"w", "e"};
  const int64_t before = MemoryTracker::global().snapshot().live[size_t(MemCategory::quantized_weights)];
  s.finalize(DType::bf16, DType::f32, MemCategory::parameters, q, /*gradients=*/false);
  EXPECT_EQ(s.flat_numel(), 16);  // only b, padded to 16
  EXPECT_FALSE(s.has_gradients());
  EXPECT_THROW(s.param("w"), ArgumentError);
  EXPECT_THROW(s.grad("b"), ArgumentError);
  EXPECT_EQ(s.param("b").shape(), Shape({4}));
  const QuantizedTensor w = s.quantized("w"), e = s.quantized("e");
  EXPECT_EQ(w.codes.shape(), Shape({4, 8}));
  EXPECT_EQ(w.codes.dtype(), DType::i8);
  EXPECT_EQ(w.scale.shape(), Shape({4}));
  EXPECT_EQ(e.codes.shape(), Shape({3, 8}));
  EXPECT_NE(w.codes.raw_data(), e.codes.raw_data());
  EXPECT_THROW(s.quantized("b"), ArgumentError);
  // 64 + 64 code bytes (64-aligned) and 16 + 16 f32 scales, charged to their own category.
  EXPECT_EQ(MemoryTracker::global().snapshot().live[size_t(MemCategory::quantized_weights)] - before,
            128 + 32 * 4);
  ParameterStore bad;
  bad.declare("b", {4}, false);
  QuantizedLayout qb;
  qb.scheme = QuantScheme::fp8;
  qb.names = {"b"};
  EXPECT_THROW(bad.finalize(DType::f32, DType::f32, MemCategory::parameters, qb), ArgumentError);
}

TEST(QuantizedModel, CodesAreQuantizeRowsOfTheWeightsAndTheRestIsBf16) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  const std::unique_ptr<Model> m = bert_tiny(fx);
  const std::unique_ptr<Model> q = quantize_model(*m, QuantScheme::int8_dynamic);
  const ParameterStore& s = q->params();
  EXPECT_EQ(s.flat_params().dtype(), DType::bf16);
  int64_t quantized = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string& n = s.infos()[i].name;
    const Tensor w = m->params().param(n);
    if (!s.is_quantized(i)) {
      EXPECT_EQ(s.param(i).to_floats(), w.to(DType::bf16).to_floats()) << n;
      continue;
    }
    ++quantized;
    Tensor codes = Tensor::empty(w.shape(), DType::i8), scale = Tensor::empty({w.size(0)}, DType::f32);
    ref::quantize_rows(w, codes, scale);
    EXPECT_EQ(s.quantized(i).codes.to_doubles(), codes.to_doubles()) << n;
    EXPECT_EQ(s.quantized(i).scale.to_floats(), scale.to_floats()) << n;
    EXPECT_EQ(n.find("classifier"), std::string::npos) << "the head stays bf16";
    EXPECT_EQ(n.find("LayerNorm"), std::string::npos);
  }
  // 2 layers x (qkv, attention output, intermediate, output) + word, position, token type tables.
  EXPECT_EQ(quantized, 2 * 4 + 3);
}

TEST(QuantizedModel, Int8DynamicLinearIsTheFusedOpAndTheCompositionOfTheOps) {
  const Tensor x = Tensor::rand_uniform({2, 5, 24}, DType::f32, 3, -2.f, 2.f);
  const Tensor w = Tensor::rand_uniform({40, 24}, DType::f32, 4, -0.5f, 0.5f);
  const Tensor b = Tensor::rand_uniform({40}, DType::f32, 5, -1.f, 1.f);
  QuantizedTensor qw;
  qw.scheme = QuantScheme::int8_dynamic;
  qw.codes = Tensor::empty({40, 24}, DType::i8);
  qw.scale = Tensor::empty({40}, DType::f32);
  quantize_rows(w, qw.codes, qw.scale);
  // Inference only: a graph through it would have no gradient.
  const autograd::Var xg(x, /*requires_grad=*/true);
  EXPECT_THROW(autograd::quantized_linear(xg, qw, autograd::Var(b)), ArgumentError);
  const autograd::NoGradGuard ng;
  const Tensor got = autograd::quantized_linear(autograd::Var(x), qw, autograd::Var(b)).value();
  Tensor qx = Tensor::empty({10, 24}, DType::i8), sx = Tensor::empty({10}, DType::f32);
  ref::quantize_rows(x.reshape({10, 24}), qx, sx);
  Tensor acc = Tensor::empty({10, 40}, DType::i32), want = Tensor::empty({10, 40}, DType::f32);
  ref::gemm_s8(qx, qw.codes, acc);
  ref::dequantize_gemm(acc, sx, qw.scale, &b, want);
  EXPECT_EQ(got.shape(), Shape({2, 5, 40}));
  // The layer is the fused op bit for bit (the same quantization, the same GEMM and epilogue) ...
  Tensor fused = Tensor::empty({10, 40}, DType::f32);
  gemm_s8_dequantized(qx, qw.codes, sx, qw.scale, &b, fused);
  EXPECT_EQ(got.to_floats(), fused.to_floats());
  // ... and the definition's composition within fp32 ulps (where oneDNN's epilogue scales in
  // another order, kernels/quantize.h; exactly elsewhere).
  const std::vector<float> g = got.to_floats(), wv = want.to_floats();
  float largest = 0.f;
  for (float v : wv) largest = std::max(largest, std::fabs(v));
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], wv[i], 1e-6f * largest) << i;
  // And it is close to the float layer: per-token and per-channel int8 keep ~2 decimal digits.
  Tensor exact = Tensor::empty({10, 40}, DType::f32);
  GemmOptions o;
  o.trans_b = true;
  gemm(x.reshape({10, 24}), w, exact, o, &b);
  EXPECT_LT(test::rel_err(got.to_floats(), exact.to_floats()), 0.02);
}

TEST(QuantizedModel, EverySchemeStaysCloseToTheFp32Logits) {
  for (const char* name : {"bert_tiny", "distilbert_tiny"}) {
    const test::Fixture fx = test::load_fixture(kEncoderFixtures + name + ".mtfx");
    const std::unique_ptr<Model> m =
        load_encoder_classifier(kEncoderFixtures + name, test::encoder_fixture_options(fx));
    const Batch batch = test::encoder_fixture_batch(fx);
    const std::vector<float> fp32 = logits_of(*m, batch, false);
    for (QuantScheme s : kSchemes) {
      const std::unique_ptr<Model> q = quantize_model(*m, s);
      const std::vector<float> got = logits_of(*q, batch, true);
      // fp8 keeps 3 mantissa bits, int8 about 7: the tiny random models' logits move by at most
      // a few percent of their largest.
      EXPECT_LT(test::rel_err(got, fp32), s == QuantScheme::fp8 ? 0.15 : 0.05)
          << name << " " << quant_scheme_name(s);
    }
  }
}

TEST(QuantizedModel, GptQuantizesWithItsTiedHeadAndStaysClose) {
  GptConfig c = GptConfig::preset("gpt-nano");
  Gpt m(c, 7);
  std::vector<int32_t> ids;
  for (int i = 0; i < 2 * 32; ++i) ids.push_back((i * 37) % int(c.vocab_size));
  const Tensor idx = Tensor::from_ints(ids, {2, 32});
  const autograd::NoGradGuard ng;
  const std::vector<float> fp32 = m.forward(idx, nullptr).logits.value().to_floats();
  for (QuantScheme s : kSchemes) {
    std::unique_ptr<Model> q = quantize_model(m, s);
    auto& g = static_cast<Gpt&>(*q);
    EXPECT_TRUE(g.params().is_quantized("transformer.wte.weight"));
    const AutocastScope ac(true, DType::bf16);
    const std::vector<float> got = g.forward(idx, nullptr).logits.value().to_floats();
    EXPECT_LT(test::rel_err(got, fp32), s == QuantScheme::fp8 ? 0.15 : 0.05) << quant_scheme_name(s);
    // Incremental decoding runs on the quantized layers too, and agrees with the full forward.
    Gpt::KvCache cache = g.make_kv_cache();
    const std::vector<float> last = g.decode(std::vector<int32_t>(ids.begin(), ids.begin() + 32), cache);
    const std::vector<float> full(got.begin() + 31 * c.vocab_size, got.begin() + 32 * c.vocab_size);
    EXPECT_LT(test::rel_err(last, full), 0.02) << quant_scheme_name(s);
  }
}

TEST(QuantizedModel, SavedAndReloadedGivesTheSameLogitsInCompressedTensorsLayout) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  const std::unique_ptr<Model> m = bert_tiny(fx);
  const Batch batch = test::encoder_fixture_batch(fx);
  for (QuantScheme s : kSchemes) {
    const std::unique_ptr<Model> q = quantize_model(*m, s);
    const fs::path dir = fresh_dir(std::string("save_") + std::string(quant_scheme_name(s)));
    save_encoder_classifier(*q, dir.string(), kEncoderFixtures + "bert_tiny");
    const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    const nlohmann::json& qc = cfg.at("quantization_config");
    EXPECT_EQ(qc.at("quant_method"), "compressed-tensors");
    EXPECT_EQ(qc.at("mixtrain_scheme"), quant_scheme_name(s));
    EXPECT_EQ(qc.at("format"), s == QuantScheme::fp8 ? "float-quantized" : "int-quantized");
    EXPECT_EQ(qc.at("config_groups").at("group_0").at("weights").at("strategy"), "channel");
    const SafetensorsFile f = SafetensorsFile::read((dir / "model.safetensors").string());
    const SafetensorsEntry* w = f.find("bert.encoder.layer.0.attention.self.query.weight");
    const SafetensorsEntry* sc = f.find("bert.encoder.layer.0.attention.self.query.weight_scale");
    ASSERT_TRUE(w && sc);
    EXPECT_EQ(w->dtype, s == QuantScheme::fp8 ? "F8_E4M3" : "I8");
    EXPECT_EQ(sc->dtype, "F32");
    EXPECT_EQ(sc->shape, (std::vector<int64_t>{w->shape[0], 1}));
    EXPECT_EQ(f.find("classifier.weight")->dtype, "BF16");
    const ClassifierOptions o = test::encoder_fixture_options(fx);
    EXPECT_THROW(load_encoder_classifier(dir.string(), o), IoError) << "a quantized model does not train";
    const std::unique_ptr<Model> back =
        load_encoder_classifier(dir.string(), o, DType::bf16, DType::f32, MemCategory::parameters, false);
    EXPECT_EQ(back->params().quant_scheme(), s);
    EXPECT_EQ(logits_of(*back, batch, true), logits_of(*q, batch, true)) << quant_scheme_name(s);
  }
}

// A quantized directory with one tensor of model.safetensors replaced by `edit`'s result.
fs::path with_edited_tensor(const std::string& name, const std::string& tensor,
                            const std::function<Tensor(const Tensor&)>& edit,
                            const std::string& rename = "") {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  const std::unique_ptr<Model> q = quantize_model(*bert_tiny(fx), QuantScheme::int8_dynamic);
  const fs::path dir = fresh_dir(name);
  save_encoder_classifier(*q, dir.string(), kEncoderFixtures + "bert_tiny");
  const SafetensorsFile f = SafetensorsFile::read((dir / "model.safetensors").string());
  SafetensorsWriter w;
  for (const SafetensorsEntry& e : f.entries()) {
    const Tensor t = f.tensor(e);
    if (e.name != tensor) {
      w.add(e.name, t);
    } else if (edit) {
      w.add(rename.empty() ? e.name : rename, edit(t));
    }
  }
  w.write((dir / "model.safetensors").string());
  return dir;
}

void expect_load_error(const fs::path& dir, const std::string& words) {
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  try {
    load_encoder_classifier(dir.string(), test::encoder_fixture_options(fx), DType::bf16, DType::f32,
                            MemCategory::parameters, false);
    ADD_FAILURE() << "loaded " << dir;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(words), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
}

TEST(QuantizedModel, HostileQuantizedFilesFailWithOneLineErrors) {
  const std::string q = "bert.encoder.layer.0.attention.self.query.weight";
  expect_load_error(with_edited_tensor("no_scale", q + "_scale", {}), "missing tensor '" + q + "_scale'");
  expect_load_error(with_edited_tensor("neg_scale", q + "_scale",
                                       [](const Tensor& t) {
                                         Tensor c = t.clone();
                                         c.slice(0, 1, 2).fill(-1.0);
                                         return c;
                                       }),
                    "scales must be finite and positive");
  expect_load_error(with_edited_tensor("nan_scale", q + "_scale",
                                       [](const Tensor& t) {
                                         Tensor c = t.clone();
                                         c.slice(0, 0, 1).fill(std::nan(""));
                                         return c;
                                       }),
                    "scales must be finite and positive");
  expect_load_error(with_edited_tensor("float_codes", q, [](const Tensor& t) { return t.to(DType::f32); }),
                    "expected I8");
  expect_load_error(with_edited_tensor("short_scale", q + "_scale",
                                       [](const Tensor& t) { return t.slice(0, 0, 3).contiguous(); }),
                    "one scale per output channel");
  expect_load_error(
      with_edited_tensor(
          "extra", "classifier.bias", [](const Tensor& t) { return t.clone(); }, "classifier.bias_scale"),
      "unexpected tensor 'classifier.bias_scale'");
  // A quantization_config that is not one mixtrain can run.
  const fs::path dir = with_edited_tensor("bad_config", "", {});
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  std::ofstream(dir / "config.json") << cfg.dump();
  expect_load_error(dir, "quant_method \"gptq\"");
  cfg["quantization_config"] = {{"mixtrain_scheme", "int4"}};
  std::ofstream(dir / "config.json") << cfg.dump();
  expect_load_error(dir, "unknown quantization scheme 'int4'");
}

TEST(QuantizedModel, QuantizeModelDirNeverOverwritesAndWritesWholeDirectories) {
  const fs::path src = fresh_dir("src");
  const test::Fixture fx = test::load_fixture(kEncoderFixtures + "bert_tiny.mtfx");
  save_encoder_classifier(*bert_tiny(fx), src.string(), kEncoderFixtures + "bert_tiny");
  {  // a WordPiece vocabulary of the tiny model's 99 ids, so the directory classifies text
    std::ofstream v(src / "vocab.txt");
    v << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ngood\n";
    for (int i = 6; i < 99; ++i) v << "t" << i << "\n";
  }
  const fs::path out = fresh_dir("out");
  const QuantizeResult r = quantize_model_dir(src.string(), QuantScheme::int8_dynamic, out.string());
  EXPECT_EQ(r.family, "bert");
  EXPECT_GT(r.quantized_elements, r.other_elements);
  EXPECT_EQ(r.file_bytes, int64_t(fs::file_size(out / "model.safetensors")));
  EXPECT_TRUE(fs::exists(out / "vocab.txt"));
  const auto stamp = fs::last_write_time(out / "model.safetensors");
  EXPECT_THROW(quantize_model_dir(src.string(), QuantScheme::fp8, out.string()), IoError);
  EXPECT_EQ(fs::last_write_time(out / "model.safetensors"), stamp);
  EXPECT_THROW(quantize_model_dir(out.string(), QuantScheme::fp8, fresh_dir("again").string()), IoError)
      << "an already quantized model";
  // Nothing half-written beside it.
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos) << e.path();
  // It loads as a classifier: bf16 around int8 GEMMs by default.
  const TextClassifier c = TextClassifier::load(out.string());
  EXPECT_EQ(c.compute_dtype(), DType::bf16);
  EXPECT_EQ(c.quant_scheme(), QuantScheme::int8_dynamic);
  EXPECT_EQ(c.classify({"good"}).size(), 1u);
}

TEST(QuantizedModel, GptQuantizedDirectoryLoadsForSampling) {
  const fs::path src = fresh_dir("gpt_src.safetensors");
  Gpt m(GptConfig::preset("gpt-nano"), 3);
  SafetensorsWriter w;
  for (const NamedWeight& n : m.named_weights()) w.add(n.name, n.tensor);
  w.set_metadata("mixtrain_config", m.config().to_json_text());
  w.write(src.string());
  const fs::path out = fresh_dir("gpt_int8");
  quantize_model_dir(src.string(), QuantScheme::int8_dynamic, out.string());
  const InferenceModel back = load_gpt_for_inference(out.string(), 0, {});
  EXPECT_EQ(back.model->params().quant_scheme(), QuantScheme::int8_dynamic);
  const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  EXPECT_EQ(cfg.at("model_type"), "gpt2");
  // Conv1D layout: c_attn codes (IN, OUT) with one scale per output column, (1, OUT).
  const SafetensorsFile f = SafetensorsFile::read((out / "model.safetensors").string());
  const SafetensorsEntry* sc = f.find("transformer.h.0.attn.c_attn.weight_scale");
  ASSERT_TRUE(sc);
  EXPECT_EQ(sc->shape, (std::vector<int64_t>{1, 3 * m.config().n_embd}));
  EXPECT_EQ(f.find("transformer.h.0.attn.c_attn.weight")->shape,
            (std::vector<int64_t>{m.config().n_embd, 3 * m.config().n_embd}));
}

}  // namespace
