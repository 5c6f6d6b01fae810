// The encoder's ops: activation (exact GELU, tanh, ReLU) and its backward, and the bidirectional
// masked attention softmax. The fast CPU paths against the scalar references through the op
// harness (forward and backward outputs, f32 / bf16 / f16, strided inputs); known values; the
// masking contract (padded keys exactly 0, a row without real keys uniform, masked rows equal to
// a plain softmax over the real keys); finite-difference gradient checks in double of
// activation_backward and of the autograd masked_softmax (whose rule is softmax backward * scale),
// with the tolerance of gradcheck_test.cpp: |analytic - numeric| <= 1e-8 + 1e-6 |numeric|.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"
#include "mixtrain/autograd/functions.h"

namespace mixtrain {
namespace {
using test::OpConfig;
using test::OpTest;

const char* kind_name(Activation k) {
  return k == Activation::gelu_erf ? "gelu_erf" : k == Activation::tanh ? "tanh" : "relu";
}

constexpr int kPortable = 1;  // OpConfig::flags: the fast op's portable loops

// activation(kind) forward and backward: outputs out and dx.
struct ActivationTest : OpTest {
  Activation kind;
  explicit ActivationTest(Activation k) : kind(k) {}
  std::string name() const override { return std::string("activation ") + kind_name(kind); }
  std::vector<std::string> ops() const override { return {"activation", "activation_backward"}; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> out;
    uint64_t seed = 1;
    for (const Shape& s : {Shape{7}, Shape{5, 33}, Shape{2, 3, 2100}, Shape{64, 2048}})
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (bool nc : {false, true}) {
          OpConfig c;
          c.sizes.assign(s.begin(), s.end());
          c.in = c.out = t;
          c.non_contiguous = nc;
          c.seed = seed++;
          c.label = std::string(dtype_name(t)) + " " + s.to_string() + (nc ? " strided" : "");
          out.push_back(c);
        }
    // The erf GELU's again through the portable loops (simd_forms.h), which a CPU without AVX-512 runs.
    return kind == Activation::gelu_erf ? test::with_portable_twins(out, kPortable) : out;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s(cfg.sizes.begin(), cfg.sizes.end());
    const Tensor x = test::make_input(s, cfg.in, cfg.seed, cfg.non_contiguous, -4.f, 4.f);
    const Tensor g = test::make_input(s, cfg.in, cfg.seed + 1000, cfg.non_contiguous);
    Tensor y = Tensor::empty(s, cfg.out), dx = Tensor::empty(s, cfg.out);
    const test::PortableForms form(!reference && (cfg.flags & kPortable));
    if (reference) {
      ref::activation(kind, x, y);
      ref::activation_backward(kind, x, g, dx);
    } else {
      activation(kind, x, y);
      activation_backward(kind, x, g, dx);
    }
    return {y, dx};
  }
};

// Key mask (B, Tk) with real-token counts lens[b] (0 = a fully padded row).
Tensor key_mask(const std::vector<int>& lens, int64_t Tk) {
  std::vector<int32_t> m;
  for (int n : lens)
    for (int64_t j = 0; j < Tk; ++j) m.push_back(j < n ? 1 : 0);
  return Tensor::from_ints(m, {static_cast<int64_t>(lens.size()), Tk});
}

// masked_softmax on (B*H, Tq, Tk) with padding (and a fully padded row).
struct MaskedSoftmaxTest : OpTest {
  std::string name() const override { return "masked_softmax"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> out;
    uint64_t seed = 1;
    for (auto sz : {std::vector<int64_t>{2, 3, 5, 5}, std::vector<int64_t>{3, 4, 33, 33},
                    std::vector<int64_t>{4, 12, 128, 128}})
      for (auto [in, o] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::f32},
                           std::pair{DType::bf16, DType::bf16}, std::pair{DType::f16, DType::f16}}) {
        OpConfig c;
        c.sizes = sz;  // B, H, Tq, Tk
        c.in = in;
        c.out = o;
        c.seed = seed++;
        c.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(o)) +
                  " B=" + std::to_string(sz[0]) + " H=" + std::to_string(sz[1]) +
                  " T=" + std::to_string(sz[2]);
        out.push_back(c);
      }
    return out;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t B = cfg.sizes[0], H = cfg.sizes[1], Tq = cfg.sizes[2], Tk = cfg.sizes[3];
    std::vector<int> lens;
    for (int64_t b = 0; b < B; ++b) lens.push_back(b + 1 == B ? 0 : static_cast<int>(Tk - 2 * b));
    const Tensor mask = key_mask(lens, Tk);
    const Tensor x = test::make_input({B * H, Tq, Tk}, cfg.in, cfg.seed, false, -6.f, 6.f);
    Tensor y = Tensor::empty({B * H, Tq, Tk}, cfg.out);
    if (reference)
      ref::masked_softmax(x, mask, 0.35f, y);
    else
      masked_softmax(x, mask, 0.35f, y);
    return {y};
  }
};

// The configurations large enough to be split across threads (the 1-vs-2-threads check).
bool split_across_threads(const OpConfig& cfg) { return cfg.sizes.size() >= 2 && cfg.sizes[0] >= 4; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(MaskedSoftmaxTest, split_across_threads);
static test::OpRegistrar gelu_erf_reg(std::make_unique<ActivationTest>(Activation::gelu_erf),
                                      split_across_threads);
static test::OpRegistrar tanh_reg(std::make_unique<ActivationTest>(Activation::tanh), split_across_threads);
static test::OpRegistrar relu_reg(std::make_unique<ActivationTest>(Activation::relu), split_across_threads);

}  // namespace

TEST(EncoderOps, KnownValues) {
  // torch.nn.functional.gelu (exact) at -3, -1, 0, 0.5, 1, 3; tanh; relu (NaN stays NaN).
  const Tensor x = Tensor::from_vector({-3, -1, 0, 0.5, 1, 3}, {6}, DType::f64);
  const std::vector<double> gelu = {-0.0040496182, -0.15865525393, 0.0,
                                    0.34573123063, 0.84134474607,  2.99595038};
  for (bool fast : {false, true}) {
    for (DType t : {DType::f64, DType::f32}) {
      const Tensor xt = x.to(t);
      Tensor y = Tensor::empty({6}, t);
      fast ? activation(Activation::gelu_erf, xt, y) : ref::activation(Activation::gelu_erf, xt, y);
      const auto v = y.to_doubles();
      for (size_t i = 0; i < v.size(); ++i)
        EXPECT_NEAR(v[i], gelu[i], 1e-6) << "gelu_erf(" << x.to_doubles()[i] << ")";
      fast ? activation(Activation::tanh, xt, y) : ref::activation(Activation::tanh, xt, y);
      EXPECT_NEAR(y.to_doubles()[4], std::tanh(1.0), 1e-7);
    }
  }
  const Tensor n = Tensor::from_floats({NAN, -2.f, 2.f}, {3}, DType::f32);
  Tensor r = Tensor::empty({3}, DType::f32);
  activation(Activation::relu, n, r);
  EXPECT_TRUE(std::isnan(r.to_floats()[0]));
  EXPECT_EQ(r.to_floats()[1], 0.f);
  EXPECT_EQ(r.to_floats()[2], 2.f);
}

// The vectorisable erf of the GELU kernels (cpu_rows.h) against double erf: every 61st fp32 bit
// pattern in [0, 4.5] and its negative (about 35M points), within 1.5 ulp of the fp32 result;
// the ends and NaN exactly.
TEST(EncoderOps, ErfF32IsWithinOneAndAHalfUlp) {
  const uint32_t last = std::bit_cast<uint32_t>(4.5f);
  double worst = 0;
  float worst_at = 0;
  for (uint32_t bits = 0; bits <= last; bits += 61) {
    for (float x : {std::bit_cast<float>(bits), -std::bit_cast<float>(bits)}) {
      const double want = std::erf(static_cast<double>(x));
      const float w32 = static_cast<float>(want);
      const double ulp = std::nextafter(std::fabs(w32), INFINITY) - std::fabs(w32);
      const double err = std::fabs(static_cast<double>(cpu::erf_f32(x)) - want) / ulp;
      if (err > worst) worst = err, worst_at = x;
    }
  }
  EXPECT_LE(worst, 1.5) << "worst at x = " << worst_at;
  EXPECT_EQ(cpu::erf_f32(INFINITY), 1.f);
  EXPECT_EQ(cpu::erf_f32(-INFINITY), -1.f);
  EXPECT_EQ(cpu::erf_f32(0.f), 0.f);
  EXPECT_EQ(cpu::erf_f32(10.f), 1.f);
  EXPECT_TRUE(std::isnan(cpu::erf_f32(NAN)));
}

TEST(EncoderOps, MaskedKeysAreZeroRealKeysAreASoftmaxAndAnEmptyRowIsUniform) {
  const int64_t B = 3, H = 2, T = 6;
  const Tensor mask = key_mask({6, 4, 0}, T);
  const Tensor x = Tensor::rand_uniform({B * H, T, T}, DType::f32, 5, -3.f, 3.f);
  Tensor y = Tensor::empty({B * H, T, T}, DType::f32);
  masked_softmax(x, mask, 0.5f, y);
  const auto xv = x.to_floats(), yv = y.to_floats();
  for (int64_t n = 0; n < B * H; ++n)
    for (int64_t i = 0; i < T; ++i) {
      const int64_t b = n / H, real = b == 0 ? 6 : b == 1 ? 4 : 0;
      const size_t row = static_cast<size_t>((n * T + i) * T);
      double sum = 0;
      for (int64_t j = 0; j < real; ++j) sum += std::exp(0.5 * xv[row + j]);
      for (int64_t j = 0; j < T; ++j) {
        const double want = real == 0 ? 1.0 / T : j < real ? std::exp(0.5 * xv[row + j]) / sum : 0.0;
        if (j >= real && real > 0) {
          EXPECT_EQ(yv[row + j], 0.f) << "a padded key is exactly 0";
        }
        EXPECT_NEAR(yv[row + j], want, 1e-6) << "head " << n << " query " << i << " key " << j;
      }
    }
}

// The exponentials of a row as the unfused kernel took them: a loop compiled like the library's
// row loops (the same clones, so the same contractions into FMAs as the fast kernel's).
MIXTRAIN_SIMD_CLONES void exp_sub_row(const float* s, float m, float* e, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) e[i] = cpu::exp_f32(s[i] - m);
}

// The fast row is the unfused formula bit for bit: s = scale x where the key is real, -inf
// elsewhere; e = exp_f32(s - max_f32(s)); y = e * (1 / sum_f32(e)) over the whole row (then
// rounded to bf16). Guards the kernel's fusions (one pass for the exponentials and their blocked
// sum, the 1/sum in the rounding) and its stop at a batch row's last real key, for row lengths
// around the 16 lanes, past one and three 4096-element sum blocks (whose pairwise tree depends on
// the block count), and masks with holes.
TEST(EncoderOps, MaskedSoftmaxFastRowIsTheUnfusedFormulaBitForBit) {
  for (int64_t Tk : {5, 16, 37, 128, 300, 4100, 16400}) {
    std::vector<std::vector<int32_t>> masks;
    for (int64_t L : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{12283}, Tk - 1, Tk}) {
      if (L < 1 || L > Tk) continue;
      std::vector<int32_t> m(static_cast<size_t>(Tk), 0);
      for (int64_t j = 0; j < L; ++j) m[static_cast<size_t>(j)] = 1;
      masks.push_back(m);
      for (int64_t j = 1; j < L; j += 3) m[static_cast<size_t>(j)] = 0;  // holes before the last real key
      masks.push_back(m);
    }
    std::vector<int32_t> flat;
    for (const auto& m : masks) flat.insert(flat.end(), m.begin(), m.end());
    const int64_t B = static_cast<int64_t>(masks.size()), H = 2, Tq = 2;
    const Tensor mask = Tensor::from_ints(flat, {B, Tk});
    const Tensor x = Tensor::rand_uniform({B * H, Tq, Tk}, DType::f32, 11, -6.f, 6.f);
    const float scale = 0.35f;
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor y = Tensor::empty(x.shape(), dt);
      masked_softmax(x, mask, scale, y);
      const std::vector<float> xv = x.to_floats(), yv = y.to_floats();
      std::vector<float> sc(static_cast<size_t>(Tk)), e(static_cast<size_t>(Tk));
      for (int64_t r = 0; r < B * H * Tq; ++r) {
        const std::vector<int32_t>& m = masks[static_cast<size_t>((r / Tq) / H)];
        for (int64_t j = 0; j < Tk; ++j)
          sc[size_t(j)] = m[size_t(j)] != 0 ? scale * xv[size_t(r * Tk + j)] : -INFINITY;
        const float mx = cpu::max_f32(sc.data(), Tk);
        exp_sub_row(sc.data(), mx, e.data(), Tk);
        const float inv = 1.f / cpu::sum_f32(e.data(), Tk);
        for (int64_t j = 0; j < Tk; ++j) {
          float want = e[size_t(j)] * inv;
          if (dt == DType::bf16) want = f32_from_bf16(bf16_from_f32(want));
          ASSERT_EQ(std::bit_cast<uint32_t>(yv[size_t(r * Tk + j)]), std::bit_cast<uint32_t>(want))
              << dtype_name(dt) << " Tk " << Tk << " row " << r << " key " << j;
        }
      }
    }
  }
}

TEST(EncoderOps, MaskedSoftmaxRejectsBadShapes) {
  const Tensor x = Tensor::zeros({4, 3, 5}, DType::f32);
  Tensor y = Tensor::empty({4, 3, 5}, DType::f32);
  EXPECT_THROW(masked_softmax(x, key_mask({5, 5, 5}, 5), 1.f, y),
               ShapeError);                                                  // 4 heads not divisible by B = 3
  EXPECT_THROW(masked_softmax(x, key_mask({4, 4}, 4), 1.f, y), ShapeError);  // Tk 4 != 5
  EXPECT_THROW(masked_softmax(x, Tensor::zeros({2, 5}, DType::f32), 1.f, y), DTypeError);  // mask not i32
}

// Central differences in double, as gradcheck_test.cpp.
constexpr double kH = 1e-6, kRtol = 1e-6, kAtol = 1e-8;

TEST(EncoderOps, ActivationBackwardMatchesFiniteDifferences) {
  for (Activation k : {Activation::gelu_erf, Activation::tanh, Activation::relu}) {
    const Tensor x = Tensor::from_vector({-2.5, -0.7, -0.1, 0.3, 1.1, 2.9}, {6}, DType::f64);
    const Tensor g = Tensor::from_vector({0.3, -1.2, 0.8, 1.5, -0.4, 0.9}, {6}, DType::f64);
    Tensor dx = Tensor::empty({6}, DType::f64);
    activation_backward(k, x, g, dx);
    const auto xv = x.to_doubles(), gv = g.to_doubles(), dv = dx.to_doubles();
    for (size_t i = 0; i < xv.size(); ++i) {
      Tensor p = Tensor::from_vector({xv[i] + kH}, {1}, DType::f64),
             m = Tensor::from_vector({xv[i] - kH}, {1}, DType::f64);
      Tensor yp = Tensor::empty({1}, DType::f64), ym = Tensor::empty({1}, DType::f64);
      activation(k, p, yp);
      activation(k, m, ym);
      const double num = gv[i] * (yp.to_doubles()[0] - ym.to_doubles()[0]) / (2 * kH);
      EXPECT_NEAR(dv[i], num, kAtol + kRtol * std::fabs(num)) << kind_name(k) << " at " << xv[i];
    }
  }
}

TEST(EncoderOps, AutogradMaskedSoftmaxGradientMatchesFiniteDifferences) {
  const int64_t B = 2, H = 2, T = 4;
  const float s = 0.7f;
  const Tensor mask = key_mask({3, 1}, T);
  const Tensor x0 = Tensor::rand_uniform({B * H, T, T}, DType::f32, 9, -2.f, 2.f).to(DType::f64);
  const Tensor r = Tensor::rand_uniform({B * H, T, T}, DType::f32, 10, -1.f, 1.f).to(DType::f64);
  autograd::Var x(x0.clone(), true);
  autograd::masked_softmax(x, mask, s).backward_from(r);
  const auto grad = x.grad().to_doubles(), rv = r.to_doubles();
  auto loss = [&](const Tensor& xt) {
    Tensor y = Tensor::empty(xt.shape(), DType::f64);
    masked_softmax(xt, mask, s, y);
    double l = 0;
    const auto yv = y.to_doubles();
    for (size_t i = 0; i < yv.size(); ++i) l += yv[i] * rv[i];
    return l;
  };
  const auto xv = x0.to_doubles();
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<double> p = xv, m = xv;
    p[i] += kH;
    m[i] -= kH;
    const double num = (loss(Tensor::from_vector(p, x0.shape(), DType::f64)) -
                        loss(Tensor::from_vector(m, x0.shape(), DType::f64))) /
                       (2 * kH);
    EXPECT_NEAR(grad[i], num, kAtol + kRtol * std::fabs(num)) << "element " << i;
  }
}

}  // namespace mixtrain
