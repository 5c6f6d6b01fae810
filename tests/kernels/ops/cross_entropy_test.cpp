// Cross-entropy from logits: fast CPU kernel vs the scalar reference (per-row losses and the mean)
// over odd, vocabulary-sized and large shapes, f32/bf16/f16 logits, strided logits, ignored rows;
// f64 reference values; thread-count determinism.
#include <cmath>
#include <cstring>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

Shape shape_of(const OpConfig& cfg) { return Shape(cfg.sizes.begin(), cfg.sizes.end()); }

// Targets in [0, V), about one in five -1 (ignored) when `ignore`.
std::vector<int32_t> make_targets(int64_t R, int64_t V, uint64_t seed, bool ignore) {
  std::vector<int32_t> t(static_cast<size_t>(R));
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  for (auto& v : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t r = s >> 33;
    v = (ignore && r % 5 == 0) ? -1 : static_cast<int32_t>((r / 5) % static_cast<uint64_t>(V));
  }
  return t;
}

enum Flags { kIgnore = 1, kWide = 2 };

struct CrossEntropyTest : OpTest {
  std::string name() const override { return "cross_entropy"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    auto push = [&](const Shape& s, DType in, bool nc, int flags) {
      OpConfig k;
      k.sizes.assign(s.begin(), s.end());
      k.in = in;
      k.out = DType::f32;
      k.non_contiguous = nc;
      k.flags = flags;
      k.seed = seed++;
      k.label = std::string(dtype_name(in)) + " " + s.to_string() + (nc ? " strided" : "") +
                (flags & kIgnore ? " ignore" : "") + (flags & kWide ? " wide" : "");
      c.push_back(k);
    };
    for (const Shape& s : {Shape{1, 1}, Shape{3, 7}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}, Shape{5}})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        push(s, t, false, 0);
        push(s, t, false, kIgnore);
      }
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (DType t : {DType::f32, DType::bf16}) {
        push(s, t, true, kIgnore);
        push(s, t, false, kWide);
      }
    push({256, 4099}, DType::f32, false, kIgnore);
    push({256, 4099}, DType::bf16, false, 0);
    push({4, 50257}, DType::f32, false, kWide);
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const float r = (cfg.flags & kWide) ? 30.f : 2.f;
    const Tensor logits = make_input(s, cfg.in, cfg.seed, cfg.non_contiguous, -r, r);
    const Shape lead(s.begin(), s.end() - 1);
    const Tensor targets =
        Tensor::from_ints(make_targets(lead.numel(), s.back(), cfg.seed, cfg.flags & kIgnore), lead);
    Tensor losses = Tensor::empty(lead, DType::f32);
    const double mean = (reference ? ref::cross_entropy : mixtrain::cross_entropy)(logits, targets, &losses);
    return {losses, Tensor::from_vector({mean}, {1}, DType::f64)};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t index) const override {
    // loss = max + log(sum) - x[t]: terms of size ~|logit range| that may cancel.
    const int64_t V = cfg.sizes.back();
    const double scale = (cfg.flags & kWide) ? 60.0 : 4.0 + std::log(static_cast<double>(V));
    const int64_t R = shape_of(cfg).numel() / std::max<int64_t>(V, 1);
    return default_tolerance(DType::f32, index == 0 ? V : V + R, scale);
  }
};
// The configurations large enough to be split across threads (the 1-vs-2-threads check).
bool split_across_threads(const OpConfig& cfg) { return shape_of(cfg).numel() >= 100000; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(CrossEntropyTest, split_across_threads);

TEST(CrossEntropyRef, KnownValuesF64) {
  // Uniform logits: every row's loss is ln V, whatever the target; -1 rows are 0 and not counted.
  const int64_t V = 7;
  const Tensor uniform = Tensor::full({4, V}, DType::f64, 3.5);
  const Tensor targets = Tensor::from_ints({0, 6, -1, 3}, {4});
  Tensor losses = Tensor::empty({4}, DType::f64);
  EXPECT_NEAR(cross_entropy(uniform, targets, &losses), std::log(7.0), 1e-15);
  const std::vector<double> l = losses.to_doubles();
  EXPECT_NEAR(l[0], std::log(7.0), 1e-15);
  EXPECT_EQ(l[2], 0.0);
  // Two classes [0, ln 2], target 1: p = 2/3, loss = ln(3/2).
  const Tensor two = Tensor::from_vector({0.0, std::log(2.0)}, {1, 2}, DType::f64);
  EXPECT_NEAR(cross_entropy(two, Tensor::from_ints({1}, {1})), std::log(1.5), 1e-15);
  // A huge logit: log-sum-exp does not overflow.
  const Tensor big = Tensor::from_vector({1000.0, 0.0}, {1, 2}, DType::f64);
  EXPECT_NEAR(cross_entropy(big, Tensor::from_ints({1}, {1})), 1000.0, 1e-12);
  // Every row ignored: mean 0.
  EXPECT_EQ(cross_entropy(uniform, Tensor::from_ints({-1, -1, -1, -1}, {4})), 0.0);
  // The fast fp32 path.
  EXPECT_NEAR(cross_entropy(uniform.to(DType::f32), targets), std::log(7.0), 1e-6);
  EXPECT_NEAR(cross_entropy(big.to(DType::f32), Tensor::from_ints({1}, {1})), 1000.0, 1e-3);
  EXPECT_EQ(cross_entropy(uniform.to(DType::bf16), Tensor::from_ints({-1, -1, -1, -1}, {4})), 0.0);
}

}  // namespace
}  // namespace mixtrain::test
