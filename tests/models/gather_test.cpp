// ZeRO-3's gathers in a model's forward and backward (nn/gather.h), checked in one process with
// a gatherer that poisons: every parameter outside the units gathered at the time holds NaN, so a
// read of one outside its window changes the loss or a gradient. With it the GPT gives the plain
// model's loss and gradients bit for bit (plain graph and activation checkpointing, fp32 and
// bf16 autocast), in the order ZeRO-3 needs: each block gathered before its forward and again
// before its backward, released after each; the rest (embeddings, ln_f, head) for the whole pass.
#include "mixtrain/nn/gather.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mixtrain/models/gpt.h"
#include "mixtrain/optim/mixed_precision.h"

namespace mixtrain {
namespace {

class PoisoningGather final : public ParameterGather {
 public:
  explicit PoisoningGather(ParameterStore& s) : store_(s), truth_(s.flat_params().to_floats()) {
    poison({{0, s.flat_numel()}});
  }
  bool is_gathered(const FlatRanges& unit) const override {
    for (const FlatRanges& u : held_)
      if (u == unit) return true;
    return false;
  }
  void gather(const FlatRanges& unit) override {
    if (is_gathered(unit)) return;
    log.push_back("gather " + name(unit));
    Tensor p = store_.flat_params();
    for (const auto& [b, e] : unit)
      p.slice(0, b, e).copy_from(
          Tensor::from_vector(std::vector<double>(truth_.begin() + b, truth_.begin() + e), {e - b},
                              DType::f32, MemCategory::workspace));
    held_.push_back(unit);
  }
  void release(const FlatRanges& unit) override {
    for (size_t i = 0; i < held_.size(); ++i)
      if (held_[i] == unit) {
        log.push_back("release " + name(unit));
        poison(unit);
        held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  }
  void release_all() {
    while (!held_.empty()) release(FlatRanges(held_.back()));
  }
  std::vector<std::string> log;

 private:
  std::string name(const FlatRanges& unit) const {
    for (size_t l = 0;; ++l) {
      const std::string prefix = "transformer.h." + std::to_string(l) + ".";
      bool exists = false;
      for (const ParamInfo& p : store_.infos()) exists = exists || p.name.rfind(prefix, 0) == 0;
      if (!exists) return "rest";
      if (nn::unit_of(store_, {prefix}) == unit) return "h" + std::to_string(l);
    }
  }
  void poison(const FlatRanges& unit) {
    Tensor p = store_.flat_params();
    for (const auto& [b, e] : unit) p.slice(0, b, e).fill(NAN);
  }
  ParameterStore& store_;
  std::vector<float> truth_;
  std::vector<FlatRanges> held_;
};

GptConfig config() {
  GptConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 3, c.n_head = 2, c.n_embd = 32, c.dropout = 0.1f;
  return c;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

Result run(const char* precision, bool checkpointing, PoisoningGather** installed,
           std::vector<std::string>* log) {
  MixedPrecision mp(precision);
  Gpt model(config(), 11, mp.param_dtype(), mp.grad_dtype());
  model.set_activation_checkpointing(checkpointing);
  std::unique_ptr<PoisoningGather> g;
  if (installed) {
    g = std::make_unique<PoisoningGather>(model.params());
    model.params().set_gather(g.get());
    *installed = g.get();
  }
  std::vector<int32_t> ids(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5 + 1) % 64);
  const Tensor idx = Tensor::from_ints(ids, {2, 16});
  model.params().zero_grads();
  autograd::Var loss = mp.forward([&] { return model.forward(idx, &idx, true, 5).loss; });
  if (g) g->log.push_back("backward");
  mp.backward(loss);
  if (g) {
    g->release_all();
    // Evaluation (no gradients): every unit released at the end of its pass.
    autograd::NoGradGuard no_grad;
    g->log.push_back("eval");
    (void)mp.forward([&] { return model.forward(idx, &idx, false, 0).loss; });
    EXPECT_FALSE(g->is_gathered(nn::unit_of(model.params(), {"transformer.h.0."})));
    *log = g->log;
    model.params().set_gather(nullptr);
  }
  return {loss.value().item(), model.params().flat_grads().to_floats()};
}

TEST(ZeroGather, BlockByBlockGivesThePlainModelsLossAndGradientsInZero3sOrder) {
  for (const char* precision : {"32-true", "bf16-mixed", "bf16-true"})
    for (bool ckpt : {false, true}) {
      const std::string what = std::string(precision) + (ckpt ? " checkpointed" : "");
      PoisoningGather* g = nullptr;
      std::vector<std::string> log;
      const Result plain = run(precision, ckpt, nullptr, nullptr), gathered = run(precision, ckpt, &g, &log);
      ASSERT_TRUE(std::isfinite(plain.loss)) << what;
      EXPECT_EQ(gathered.loss, plain.loss) << what;
      ASSERT_EQ(gathered.grads.size(), plain.grads.size());
      size_t differ = 0;
      for (size_t i = 0; i < plain.grads.size(); ++i)
        if (std::memcmp(&plain.grads[i], &gathered.grads[i], sizeof(float)) != 0) ++differ;
      EXPECT_EQ(differ, 0u) << what << ": gradients differ";
      const std::vector<std::string> want = {
          "gather rest", "gather h0",  "release h0",   "gather h1",  "release h1",  "gather h2",
          "release h2",  "backward",   "gather h2",    "release h2", "gather h1",   "release h1",
          "gather h0",   "release h0", "release rest", "eval",       "gather rest", "gather h0",
          "release h0",  "gather h1",  "release h1",   "gather h2",  "release h2",  "release rest"};
      EXPECT_EQ(log, want) << what;
    }
}

}  // namespace
}  // namespace mixtrain
