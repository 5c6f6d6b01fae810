// The golden-fixture reader: tests/fixtures/gpt_tiny.mtfx (from tools/make_gpt_fixture.py) loads
// with every expected tensor at its expected shape, and corrupt copies of it are rejected with a
// one-line IoError that names the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "fixtures/fixture.h"

using namespace mixtrain;
using namespace mixtrain::test;
namespace fs = std::filesystem;

namespace {

const std::string kGptTiny = MIXTRAIN_SOURCE_DIR "/tests/fixtures/gpt_tiny.mtfx";

// The tiny GPT of tools/make_gpt_fixture.py.
constexpr int64_t V = 96, BS = 16, L = 2, C = 32, B = 3, T = 12, kSteps = 10;

// name -> shape for every parameter, in the model's order.
std::vector<std::pair<std::string, std::vector<int64_t>>> gpt_params() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> p = {{"transformer.wte.weight", {V, C}},
                                                                 {"transformer.wpe.weight", {BS, C}}};
  for (int l = 0; l < L; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    p.push_back({h + "ln_1.weight", {C}});
    p.push_back({h + "ln_1.bias", {C}});
    p.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    p.push_back({h + "attn.c_attn.bias", {3 * C}});
    p.push_back({h + "attn.c_proj.weight", {C, C}});
    p.push_back({h + "attn.c_proj.bias", {C}});
    p.push_back({h + "ln_2.weight", {C}});
    p.push_back({h + "ln_2.bias", {C}});
    p.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    p.push_back({h + "mlp.c_fc.bias", {4 * C}});
    p.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    p.push_back({h + "mlp.c_proj.bias", {C}});
  }
  p.push_back({"transformer.ln_f.weight", {C}});
  p.push_back({"transformer.ln_f.bias", {C}});
  return p;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FixtureCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mixtrain_fixture_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    good_ = read_bytes(kGptTiny);
    ASSERT_GT(good_.size(), 64u);
    std::memcpy(&header_len_, good_.data() + 16, 8);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<char>& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  // The good file with its JSON header replaced by `j`, padded with spaces to the original length so
  // the data section stays where it is.
  std::vector<char> with_header(const nlohmann::json& j) {
    std::string text = j.dump();
    EXPECT_LE(text.size(), header_len_);
    text.resize(header_len_, ' ');
    std::vector<char> b = good_;
    std::memcpy(b.data() + 24, text.data(), text.size());
    return b;
  }
  nlohmann::json good_header() {
    return nlohmann::json::parse(good_.begin() + 24,
                                 good_.begin() + 24 + static_cast<std::ptrdiff_t>(header_len_));
  }
  // Loading `path` throws an IoError whose single-line message names the file and contains `what`.
  static void expect_io_error(const std::string& path, const std::string& what) {
    try {
      load_fixture(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const IoError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }

  fs::path dir_;
  std::vector<char> good_;
  uint64_t header_len_ = 0;
};

}  // namespace

TEST(FixtureReader, GptTinyHasEveryTensorAtItsShape) {
  const Fixture fx = load_fixture(kGptTiny);

  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  std::vector<std::string> param_names;
  for (const auto& [name, shape] : gpt_params()) {
    param_names.push_back(name);
    expected.push_back({name, shape});
    expected.push_back({"grad." + name, shape});
    expected.push_back({"final." + name, shape});
  }
  expected.push_back({"idx", {B, T}});
  expected.push_back({"targets", {B, T}});
  expected.push_back({"logits", {B, T, V}});
  expected.push_back({"loss", {}});
  expected.push_back({"adamw.losses", {kSteps}});
  expected.push_back({"adamw.grad_norms", {kSteps}});

  std::set<std::string> names;
  for (const auto& [name, shape] : expected) {
    names.insert(name);
    ASSERT_TRUE(fx.has(name)) << name;
    const FixtureTensor& t = fx.at(name);
    EXPECT_EQ(t.shape, shape) << name;
    const bool is_int = name == "idx" || name == "targets";
    EXPECT_EQ(t.dtype, is_int ? FixtureDType::i32 : FixtureDType::f32) << name;
    EXPECT_EQ(static_cast<int64_t>(is_int ? t.i32.size() : t.f32.size()), t.numel()) << name;
    for (float v : t.f32) ASSERT_TRUE(std::isfinite(v)) << name;
  }
  EXPECT_EQ(fx.tensors.size(), names.size()) << "the fixture has tensors this test does not know";
  EXPECT_EQ(fx.header["param_names"].get<std::vector<std::string>>(), param_names);

  // The header's config is the model above.
  const auto& cfg = fx.header["config"];
  EXPECT_EQ(cfg["vocab_size"], V);
  EXPECT_EQ(cfg["block_size"], BS);
  EXPECT_EQ(cfg["n_layer"], L);
  EXPECT_EQ(cfg["n_head"], 4);
  EXPECT_EQ(cfg["n_embd"], C);
  EXPECT_EQ(cfg["batch"], B);
  EXPECT_EQ(cfg["seq_len"], T);
  EXPECT_EQ(fx.header["hyper"]["steps"], kSteps);
  EXPECT_TRUE(fx.header["torch_version"].is_string());

  // Plausible contents: tokens in range, initial loss near ln(V), the first AdamW step sees the
  // same weights and batch as the plain forward, and training lowers the loss.
  for (const auto* n : {"idx", "targets"})
    for (int32_t tok : fx.i32(n)) ASSERT_TRUE(tok >= 0 && tok < V) << n;
  const float loss = fx.f32("loss")[0];
  EXPECT_NEAR(loss, std::log(static_cast<double>(V)), 0.5);
  EXPECT_EQ(fx.f32("adamw.losses")[0], loss);
  EXPECT_LT(fx.f32("adamw.losses")[kSteps - 1], loss);
  EXPECT_THROW(fx.at("no.such.tensor"), IoError);
  EXPECT_THROW(fx.f32("idx"), IoError);
}

TEST_F(FixtureCorrupt, MissingFile) { expect_io_error((dir_ / "absent.mtfx").string(), "cannot open"); }

TEST_F(FixtureCorrupt, Truncated) {
  expect_io_error(write("short.mtfx", {good_.begin(), good_.begin() + 10}), "truncated");
  // Inside the header: the header length now runs past the end.
  expect_io_error(write("mid_header.mtfx", {good_.begin(), good_.begin() + 100}), "header length");
  // One byte short: the last tensor ends exactly at the end of the file, so it no longer fits.
  expect_io_error(write("one_short.mtfx", {good_.begin(), good_.end() - 1}), "past the end of the data");
}

TEST_F(FixtureCorrupt, BadMagic) {
  std::vector<char> b = good_;
  b[0] = 'Q';
  expect_io_error(write("magic.mtfx", b), "bad magic");
}

TEST_F(FixtureCorrupt, BadVersion) {
  std::vector<char> b = good_;
  const uint32_t v = 2;
  std::memcpy(b.data() + 8, &v, 4);
  expect_io_error(write("version.mtfx", b), "unsupported version 2");
}

TEST_F(FixtureCorrupt, HeaderLengthPastTheEnd) {
  for (uint64_t len : {static_cast<uint64_t>(good_.size()), ~uint64_t{0}}) {
    std::vector<char> b = good_;
    std::memcpy(b.data() + 16, &len, 8);
    expect_io_error(write("header_len.mtfx", b), "header length");
  }
}

TEST_F(FixtureCorrupt, HeaderNotJson) {
  std::vector<char> b = good_;
  b[24] = '#';
  expect_io_error(write("json.mtfx", b), "not valid JSON");
}

TEST_F(FixtureCorrupt, TensorPastTheEnd) {
  const uint64_t data_size = good_.size() - 24 - header_len_;
  const uint64_t past = (data_size + 63) / 64 * 64;  // aligned, so only the bounds check can fire
  nlohmann::json j = good_header();
  j["tensors"]["loss"]["offset"] = past;
  expect_io_error(write("offset.mtfx", with_header(j)), "past the end of the data");

  // An offset near 2^64 must not wrap around the bounds check.
  j = good_header();
  j["tensors"]["loss"]["offset"] = ~uint64_t{63};
  expect_io_error(write("offset_wrap.mtfx", with_header(j)), "past the end of the data");

  // A shape larger than the data (nbytes agreeing with it).
  j = good_header();
  j["tensors"]["logits"]["shape"] = {B, T, V * 1000};
  j["tensors"]["logits"]["nbytes"] = B * T * V * 1000 * 4;
  expect_io_error(write("shape.mtfx", with_header(j)), "past the end of the data");
}

TEST_F(FixtureCorrupt, InconsistentEntries) {
  nlohmann::json j = good_header();
  j["tensors"]["loss"]["nbytes"] = 8;
  expect_io_error(write("nbytes.mtfx", with_header(j)), "does not match its shape");

  j = good_header();
  j["tensors"]["loss"]["dtype"] = "f16";
  expect_io_error(write("dtype.mtfx", with_header(j)), "is not f32 or i32");

  j = good_header();
  j["tensors"]["loss"]["offset"] = j["tensors"]["loss"]["offset"].get<uint64_t>() + 4;
  expect_io_error(write("align.mtfx", with_header(j)), "not 64-byte aligned");

  j = good_header();
  j["tensors"]["idx"]["shape"] = {B, -T};
  expect_io_error(write("negative.mtfx", with_header(j)), "negative");
}
