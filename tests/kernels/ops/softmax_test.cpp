// Softmax over the last dim: fast CPU kernel vs the scalar reference over odd, vocabulary-sized
// and large shapes, f32/bf16/f16 storage both ways, strided inputs and outputs, wide logit
// ranges; f64 reference values; thread-count determinism.
#include <cmath>
#include <cstring>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

Shape shape_of(const OpConfig& cfg) { return Shape(cfg.sizes.begin(), cfg.sizes.end()); }
enum Flags { kStridedOut = 1, kWide = 2 };

struct SoftmaxTest : OpTest {
  std::string name() const override { return "softmax_last"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    auto push = [&](const Shape& s, DType in, DType out, bool nc, int flags) {
      OpConfig k;
      k.sizes.assign(s.begin(), s.end());
      k.in = in;
      k.out = out;
      k.non_contiguous = nc;
      k.flags = flags;
      k.seed = seed++;
      k.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) + " " + s.to_string() +
                (nc ? " strided" : "") + (flags & kStridedOut ? " strided-out" : "") +
                (flags & kWide ? " wide" : "");
      c.push_back(k);
    };
    const std::pair<DType, DType> pairs[] = {{DType::f32, DType::f32},  {DType::bf16, DType::bf16},
                                             {DType::f16, DType::f16},  {DType::bf16, DType::f32},
                                             {DType::f32, DType::bf16}, {DType::f16, DType::f32}};
    for (const Shape& s :
         {Shape{1}, Shape{3}, Shape{4, 1}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}, Shape{0, 4}})
      for (auto [in, out] : pairs) push(s, in, out, false, 0);
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (DType t : {DType::f32, DType::bf16}) {
        push(s, t, t, true, 0);
        push(s, t, DType::f32, true, kStridedOut);
        push(s, t, t, false, kWide);
      }
    for (auto [in, out] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::bf16}}) {
      push({256, 4099}, in, out, false, 0);
      push({3, 50257}, in, out, false, kWide);
    }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const float r = (cfg.flags & kWide) ? 40.f : 2.f;  // wide: exp spans ~35 decades, some underflow
    const Tensor x = make_input(s, cfg.in, cfg.seed, cfg.non_contiguous, -r, r);
    Tensor out;
    if (cfg.flags & kStridedOut) {
      Shape wide = s;
      wide[wide.size() - 1] += 4;
      out = Tensor::full(wide, cfg.out, 9.0).slice(s.size() - 1, 3, 3 + s.back());
    } else {
      out = Tensor::empty(s, cfg.out);
    }
    (reference ? ref::softmax_last : mixtrain::softmax_last)(x, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    // Outputs are positive (no cancellation), so the budget is relative; the atol only covers
    // values near the fp32 underflow threshold (flushed to 0 by the fast exp).
    const int64_t C = cfg.sizes.back();
    return default_tolerance(cfg.out, C, 1.0 / static_cast<double>(std::max<int64_t>(C, 1)));
  }
};
// The configurations large enough to be split across threads (the 1-vs-2-threads check).
bool split_across_threads(const OpConfig& cfg) { return shape_of(cfg).numel() >= 100000; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(SoftmaxTest, split_across_threads);

TEST(SoftmaxRef, KnownValuesF64) {
  // softmax([0, ln 2]) = [1/3, 2/3]; adding a constant changes nothing; a row of equal values is
  // uniform; a huge logit dominates without overflow (max subtraction).
  const Tensor x =
      Tensor::from_vector({0.0, std::log(2.0), 1000.0, 1000.0 + std::log(2.0), 5, 5, 5, 5, 800, 0, 0, 0},
                          {3, 4}, DType::f64)
          .slice(1, 0, 4);
  const Tensor two =
      Tensor::from_vector({0.0, std::log(2.0), 1000.0, 1000.0 + std::log(2.0)}, {2, 2}, DType::f64);
  Tensor o2 = Tensor::empty({2, 2}, DType::f64);
  softmax_last(two, o2);
  const std::vector<double> p = o2.to_doubles();
  EXPECT_NEAR(p[0], 1.0 / 3, 1e-15);
  EXPECT_NEAR(p[1], 2.0 / 3, 1e-15);
  // 1000 + ln 2 is itself rounded to ulp(1000) ~ 1.1e-13.
  EXPECT_NEAR(p[2], 1.0 / 3, 1e-13);
  EXPECT_NEAR(p[3], 2.0 / 3, 1e-13);
  Tensor o = Tensor::empty({3, 4}, DType::f64);
  ref::softmax_last(x, o);
  const std::vector<double> q = o.to_doubles();
  for (int i = 4; i < 8; ++i) EXPECT_NEAR(q[static_cast<size_t>(i)], 0.25, 1e-16);
  EXPECT_EQ(q[8], 1.0);
  EXPECT_EQ(q[9], 0.0);
  // The fast fp32 path on the same values.
  Tensor f = Tensor::empty({3, 4}, DType::f32);
  softmax_last(x.to(DType::f32), f);
  const std::vector<double> r = f.to_doubles();
  EXPECT_NEAR(r[4], 0.25, 1e-7);
  EXPECT_EQ(r[8], 1.0);
}

}  // namespace
}  // namespace mixtrain::test
