// Layer norm over the last dim: fast CPU kernel vs the scalar reference (outputs, mean, rstd) over
// odd and large shapes, f32/bf16/f16 storage, f32 or 16-bit parameters, strided inputs, inputs
// with a large mean; f64 reference values; thread-count determinism.
#include <cmath>
#include <cstring>
#include <tuple>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

Shape shape_of(const OpConfig& cfg) { return Shape(cfg.sizes.begin(), cfg.sizes.end()); }
enum Flags { kParamsF32 = 1, kOffset = 2, kFlatStats = 4, kXhat = 8 };
constexpr float kEps = 1e-5f;

struct LayerNormTest : OpTest {
  std::string name() const override { return "layer_norm"; }
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
                (nc ? " strided" : "") + (flags & kParamsF32 ? " f32-params" : "") +
                (flags & kOffset ? " offset" : "") + (flags & kFlatStats ? " flat-stats" : "") +
                (flags & kXhat ? " xhat" : "");
      c.push_back(k);
    };
    const std::pair<DType, DType> pairs[] = {{DType::f32, DType::f32},
                                             {DType::bf16, DType::bf16},
                                             {DType::f16, DType::f16},
                                             {DType::bf16, DType::f32},
                                             {DType::f32, DType::bf16}};
    for (const Shape& s : {Shape{1}, Shape{3, 1}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}, Shape{0, 8}})
      for (auto [in, out] : pairs) {
        push(s, in, out, false, 0);
        push(s, in, out, false, kParamsF32);
        push(s, in, out, false, kXhat);  // x-hat written in the output's dtype
      }
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        push(s, t, t, true, kParamsF32);
        push(s, t, t, false, kOffset);
        push(s, t, t, false, kFlatStats);
        push(s, t, t, true, kXhat | kOffset);
      }
    push({256, 4099}, DType::f32, DType::f32, false, 0);
    push({256, 4099}, DType::bf16, DType::bf16, false, kParamsF32);
    push({3, 20000}, DType::f32, DType::f32, false, kOffset);
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const int64_t C = s.back();
    const bool off = cfg.flags & kOffset;
    const Tensor x =
        make_input(s, cfg.in, cfg.seed, cfg.non_contiguous, off ? 100.f : -2.f, off ? 104.f : 2.f);
    const DType pt = (cfg.flags & kParamsF32) ? DType::f32 : cfg.in;
    const Tensor w = make_input({C}, pt, cfg.seed + 1, false, 0.5f, 1.5f);
    const Tensor b = make_input({C}, pt, cfg.seed + 2, false, -1.f, 1.f);
    Tensor out = Tensor::empty(s, cfg.out);
    const Shape lead(s.begin(), s.end() - 1);
    const Shape stat = (cfg.flags & kFlatStats) ? Shape{lead.numel()} : lead;
    Tensor mean = Tensor::empty(stat, DType::f32), rstd = Tensor::empty(stat, DType::f32);
    if (!(cfg.flags & kXhat)) {
      (reference ? ref::layer_norm : mixtrain::layer_norm)(x, w, b, kEps, out, &mean, &rstd, nullptr);
      return {out, mean, rstd};
    }
    Tensor xhat = Tensor::empty(s, cfg.out);
    (reference ? ref::layer_norm : mixtrain::layer_norm)(x, w, b, kEps, out, &mean, &rstd, &xhat);
    return {out, mean, rstd, xhat};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t index) const override {
    const int64_t C = cfg.sizes.back();
    // With inputs in [100, 104] the fp32 mean carries ~ulp(100) = 7.6e-6 of rounding that the
    // centred values (std ~1.15) see as a ~100x larger relative error: widen by |mean| / std.
    const double offset = (cfg.flags & kOffset) ? 100.0 : 1.0;
    if (index == 0) {
      Tolerance t = default_tolerance(cfg.out, C, 3.0);  // |w * xhat + b| <~ 1.5 * 1.7 + 1
      if (offset > 1) t.atol *= offset, t.rtol *= offset;
      return t;
    }
    if (index == 3) {  // x-hat: |x-hat| <~ sqrt(C), like the output without the affine part
      Tolerance t = default_tolerance(cfg.out, C, std::sqrt(static_cast<double>(std::max<int64_t>(C, 1))));
      if (offset > 1) t.atol *= offset, t.rtol *= offset;
      return t;
    }
    if (index == 1) return default_tolerance(DType::f32, C, offset > 1 ? 104.0 : 2.0);  // mean
    Tolerance t = default_tolerance(DType::f32, C, 1.0);  // rstd: from the variance sum
    if (offset > 1) t.atol *= offset, t.rtol *= offset;
    return t;
  }
};
// The configurations large enough to be split across threads (the 1-vs-2-threads check).
bool split_across_threads(const OpConfig& cfg) { return shape_of(cfg).numel() >= 100000; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(LayerNormTest, split_across_threads);

TEST(LayerNormRef, KnownValuesF64) {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25, rstd = 1/sqrt(1.25); with weight 2, bias 1.
  const Tensor x = Tensor::from_vector({1, 2, 3, 4, 7, 7, 7, 7}, {2, 4}, DType::f64);
  const Tensor w = Tensor::full({4}, DType::f64, 2.0), b = Tensor::full({4}, DType::f64, 1.0);
  Tensor out = Tensor::empty({2, 4}, DType::f64), mean = Tensor::empty({2}, DType::f64),
         rstd = Tensor::empty({2}, DType::f64);
  layer_norm(x, w, b, 0.f, out, &mean, &rstd);
  const double rs = 1.0 / std::sqrt(1.25);
  const std::vector<double> o = out.to_doubles();
  EXPECT_NEAR(o[0], 1 + 2 * -1.5 * rs, 1e-15);
  EXPECT_NEAR(o[1], 1 + 2 * -0.5 * rs, 1e-15);
  EXPECT_NEAR(o[2], 1 + 2 * 0.5 * rs, 1e-15);
  EXPECT_NEAR(o[3], 1 + 2 * 1.5 * rs, 1e-15);
  EXPECT_EQ(mean.to_doubles(), (std::vector<double>{2.5, 7.0}));
  EXPECT_NEAR(rstd.at({0}), rs, 1e-15);
  EXPECT_EQ(rstd.at({1}), INFINITY);  // a constant row with eps = 0
  // eps goes inside the square root: constant row, eps = 0.25 -> rstd = 2, out = bias.
  layer_norm(x, w, b, 0.25f, out, &mean, &rstd);
  EXPECT_EQ(rstd.at({1}), 2.0);
  EXPECT_EQ(out.at({1, 2}), 1.0);
  // The fast fp32 path: same values within fp32 rounding; mean/rstd optional.
  Tensor of = Tensor::empty({2, 4}, DType::f32);
  layer_norm(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), 0.25f, of);
  EXPECT_NEAR(of.at({0, 0}), 1 + 2 * -1.5 / std::sqrt(1.5), 1e-6);
  EXPECT_EQ(of.at({1, 3}), 1.0);
}

// Backward from a saved x-hat (undefined mean; what autocast keeps in 16 bits) equals backward from
// x: exactly in f64 up to the rounding of x-hat itself, within fp32 rounding for the fast path
// with an f32 x-hat, and within bf16 rounding of x-hat for a bf16 one; reference and fast agree.
TEST(LayerNormBackward, FromNormalizedInputMatchesFromInput) {
  const int64_t R = 37, C = 96;
  const Tensor x = Tensor::randn({R, C}, DType::f32, 1, 3.f, 2.f);  // a mean offset, like a residual
  const Tensor w = Tensor::randn({C}, DType::f32, 2, 1.f, 0.2f), b = Tensor::randn({C}, DType::f32, 3);
  const Tensor dout = Tensor::randn({R, C}, DType::f32, 4);
  Tensor y = Tensor::empty({R, C}, DType::f32), mean = Tensor::empty({R}, DType::f32),
         rstd = Tensor::empty({R}, DType::f32);
  layer_norm(x, w, b, kEps, y, &mean, &rstd);
  const Tensor ones = Tensor::full({C}, DType::f32, 1.0), zeros = Tensor::zeros({C}, DType::f32);
  struct Out {
    std::vector<double> dx, dw, db;
  };
  auto run = [&](bool reference, const Tensor& xin, const Tensor& m) {
    Tensor dx = Tensor::empty({R, C}, DType::f32), dw = Tensor::zeros({C}, DType::f32),
           db = Tensor::zeros({C}, DType::f32);
    (reference ? ref::layer_norm_backward : mixtrain::layer_norm_backward)(xin, w, m, rstd, dout, dx, dw, db);
    return Out{dx.to_doubles(), dw.to_doubles(), db.to_doubles()};
  };
  auto near = [](const Out& a, const Out& e, double rel, const char* what) {
    for (const auto& [ga, ge, name] :
         {std::tuple{&a.dx, &e.dx, "dx"}, {&a.dw, &e.dw, "dw"}, {&a.db, &e.db, "db"}}) {
      double scale = 0;
      for (double v : *ge) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < ga->size(); ++i)
        ASSERT_NEAR((*ga)[i], (*ge)[i], rel * scale) << what << " " << name << "[" << i << "]";
    }
  };
  for (bool reference : {true, false}) {
    const Out from_x = run(reference, x, mean);
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor xhat = Tensor::empty({R, C}, dt);
      layer_norm(x, ones, zeros, kEps, xhat);
      const Out from_xhat = run(reference, xhat, Tensor());
      // f32: a few fp32 ulps of the largest value; bf16: x-hat carries 2^-9 relative error.
      near(from_xhat, from_x, dt == DType::f32 ? 1e-5 : 2e-2, reference ? "ref" : "fast");
    }
  }
  // The fast path and the reference agree on the normalized mode itself.
  Tensor xhat = Tensor::empty({R, C}, DType::bf16);
  layer_norm(x, ones, zeros, kEps, xhat);
  near(run(false, xhat, Tensor()), run(true, xhat, Tensor()), 1e-5, "fast vs ref");
}

}  // namespace
}  // namespace mixtrain::test
