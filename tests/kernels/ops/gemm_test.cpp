// GEMM: the oneDNN path (gemm) against the scalar reference (ref::gemm) over odd sizes, both
// transposes, batches (with b shared), strided and transposed views, every input/output dtype,
// alpha/beta/bias; plus the fp32 path against an f64 reference, the primitive cache's steady state
// and the info strings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/op_harness.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::test {
namespace {

// OpConfig::flags for GemmTest.
enum GemmFlag : int {
  kTransA = 1,    // opt.trans_a
  kTransB = 2,    // opt.trans_b
  kBias = 4,      // f32 bias row
  kAlpha = 8,     // alpha = -0.75
  kBeta = 16,     // beta = 0.5 (c starts from seeded values; otherwise c starts as NaN)
  kBShared = 32,  // batched a with a 2-D b
  kStoredT = 64,  // a and b passed as transposed views of tensors stored the other way round
  kOutT = 128,    // c is a transposed view (column-major output)
};

constexpr float kAlphaValue = -0.75f;
constexpr float kBetaValue = 0.5f;
constexpr float kInputRange = 2.f;  // inputs uniform in [-2, 2]

// A matrix argument of logical shape (.., R, C): a fresh seeded tensor, optionally sliced (leading
// dim > cols, via make_input) and optionally stored transposed (a transposed view of (.., C, R)).
Tensor make_matrix(Shape shape, DType t, uint64_t seed, bool sliced, bool stored_t) {
  if (!stored_t) return make_input(shape, t, seed, sliced, -kInputRange, kInputRange);
  Shape st = shape;
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  const int nd = shape.size();
  return make_input(st, t, seed, sliced, -kInputRange, kInputRange).transpose(nd - 2, nd - 1);
}

struct GemmTest : OpTest {
  std::string name() const override { return "gemm"; }

  // sizes = {Bt (0: 2-D), M, N, K}
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> cs;
    uint64_t seed = 100;
    auto add = [&](DType in, DType out, int64_t bt, int64_t m, int64_t n, int64_t k, int flags,
                   bool nc = false) {
      OpConfig c;
      c.sizes = {bt, m, n, k};
      c.in = in;
      c.out = out;
      c.flags = flags;
      c.non_contiguous = nc;
      c.seed = seed++;
      c.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) +
                (bt ? " Bt=" + std::to_string(bt) : "") + " M=" + std::to_string(m) +
                " N=" + std::to_string(n) + " K=" + std::to_string(k) + (flags & kTransA ? " transA" : "") +
                (flags & kTransB ? " transB" : "") + (flags & kBias ? " bias" : "") +
                (flags & kAlpha ? " alpha" : "") + (flags & kBeta ? " beta" : "") +
                (flags & kBShared ? " b-shared" : "") + (flags & kStoredT ? " stored-transposed" : "") +
                (flags & kOutT ? " c-transposed" : "") + (nc ? " sliced" : "");
      cs.push_back(c);
    };
    const DType dts[] = {DType::f32, DType::bf16, DType::f16};
    // Every input/output dtype pair over odd sizes (vectors, tiny, odd, past one block).
    for (DType in : dts)
      for (DType out : dts) {
        add(in, out, 0, 17, 33, 5, 0);
        add(in, out, 0, 65, 130, 33, 0);
        add(in, out, 0, 3, 17, 65, kBias | kBeta);
      }
    for (DType in : dts) {
      // Degenerate shapes: 1x1, row and column vectors, K = 1.
      add(in, DType::f32, 0, 1, 1, 1, 0);
      add(in, DType::f32, 0, 1, 65, 3, 0);
      add(in, DType::f32, 0, 33, 1, 17, kTransA);
      add(in, DType::f32, 0, 17, 3, 1, kTransB);
      // Both transposes, as flags and as views, contiguous and sliced.
      for (int t : {0, int{kTransA}, int{kTransB}, kTransA | kTransB}) {
        add(in, DType::f32, 0, 33, 17, 65, t);
        add(in, DType::f32, 0, 33, 17, 65, t | kStoredT);
        add(in, in, 0, 130, 65, 33, t, true);
        add(in, DType::f32, 0, 17, 33, 130, t | kStoredT, true);
      }
      // alpha / beta / bias, alone and together, into f32 and into the input dtype.
      for (int f :
           {int{kAlpha}, int{kBeta}, int{kBias}, kAlpha | kBeta, kAlpha | kBias, kAlpha | kBeta | kBias})
        for (DType out : {DType::f32, in}) add(in, out, 0, 33, 65, 17, f | kTransB);
      // Batched: b batched or shared, with transposes, slices, alpha/beta/bias.
      add(in, DType::f32, 3, 17, 33, 5, 0);
      add(in, DType::f32, 3, 17, 33, 5, kBShared);
      add(in, in, 3, 33, 17, 65, kTransA | kTransB, true);
      add(in, DType::f32, 2, 65, 33, 17, kBShared | kTransB | kBias | kBeta);
      add(in, DType::f32, 4, 33, 65, 17, kStoredT | kAlpha | kBeta | kBias);
      add(in, in, 3, 17, 33, 65, kBShared | kStoredT | kTransA, true);
      // A transposed output view, without and with bias (two different fallbacks).
      add(in, DType::f32, 0, 33, 17, 65, kOutT);
      add(in, in, 0, 33, 17, 65, kOutT | kBeta | kTransA);
      add(in, DType::f32, 0, 33, 17, 65, kOutT | kBias);
      add(in, DType::f32, 3, 17, 33, 5, kOutT | kBShared | kAlpha);
      // Large enough for oneDNN's blocked (brgemm) kernels.
      add(in, DType::f32, 0, 256, 192, 320, 0);
      add(in, DType::bf16, 0, 160, 256, 130, kTransA | kBias | kBeta);
    }
    return cs;
  }

  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t bt = cfg.sizes[0], M = cfg.sizes[1], N = cfg.sizes[2], K = cfg.sizes[3];
    const int f = cfg.flags;
    auto with_batch = [&](bool batched, int64_t r, int64_t c) {
      return batched ? Shape{bt, r, c} : Shape{r, c};
    };
    GemmOptions opt;
    opt.trans_a = f & kTransA;
    opt.trans_b = f & kTransB;
    opt.alpha = (f & kAlpha) ? kAlphaValue : 1.f;
    opt.beta = (f & kBeta) ? kBetaValue : 0.f;
    const bool stored_t = f & kStoredT;
    // a (Bt, M, K) or (Bt, K, M) transposed; b (Bt|-, K, N) or (Bt|-, N, K).
    Tensor a = make_matrix(opt.trans_a ? with_batch(bt > 0, K, M) : with_batch(bt > 0, M, K), cfg.in,
                           cfg.seed, cfg.non_contiguous, stored_t);
    const bool b_batched = bt > 0 && !(f & kBShared);
    Tensor b = make_matrix(opt.trans_b ? with_batch(b_batched, N, K) : with_batch(b_batched, K, N), cfg.in,
                           cfg.seed + 1, cfg.non_contiguous, stored_t);
    Tensor c = make_matrix(with_batch(bt > 0, M, N), cfg.out, cfg.seed + 2, false, f & kOutT);
    // beta == 0: c must not be read, so start it as NaN (it would poison the result if read).
    if (!(f & kBeta)) c.fill(std::numeric_limits<double>::quiet_NaN());
    Tensor bias;
    if (f & kBias) bias = make_input({N}, DType::f32, cfg.seed + 3, false, -kInputRange, kInputRange);
    const Tensor* bias_p = (f & kBias) ? &bias : nullptr;
    if (reference)
      ref::gemm(a, b, c, opt, bias_p);
    else
      gemm(a, b, c, opt, bias_p);
    return {c};
  }

  // The budget of default_tolerance, scaled by the typical magnitude of the result: a sum of K
  // products of two U(-2, 2) values has rms sqrt(K) * 4/3, times |alpha|, plus |bias| <= 2 and
  // |beta c| <= 2|beta|. For bf16/f16 inputs ref and fast see the same (already rounded) inputs,
  // so only the accumulation order and the output rounding differ: no extra input term.
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    const int64_t K = cfg.sizes[3];
    const double alpha = (cfg.flags & kAlpha) ? std::fabs(kAlphaValue) : 1.0;
    double scale = alpha * (4.0 / 3.0) * std::sqrt(static_cast<double>(K));
    if (cfg.flags & kBias) scale += kInputRange;
    if (cfg.flags & kBeta) scale += kBetaValue * kInputRange;
    return default_tolerance(cfg.out, K, scale);
  }
};
MIXTRAIN_REGISTER_OP_TEST(GemmTest);

// Absolute accuracy, not just agreement: the fp32 path against the f64 reference on the same
// values (the f64 ref is what finite-difference gradient checks will use).
TEST(gemm, F32AgainstF64Reference) {
  for (int t = 0; t < 4; ++t) {
    const int64_t M = 65, N = 33, K = 130;
    GemmOptions opt;
    opt.trans_a = t & 1;
    opt.trans_b = t & 2;
    opt.alpha = 0.5f;
    opt.beta = -1.f;
    Tensor a = Tensor::rand_uniform(opt.trans_a ? Shape{K, M} : Shape{M, K}, DType::f32, 11 + t, -2.f, 2.f);
    Tensor b = Tensor::rand_uniform(opt.trans_b ? Shape{N, K} : Shape{K, N}, DType::f32, 21 + t, -2.f, 2.f);
    Tensor c0 = Tensor::rand_uniform({M, N}, DType::f32, 31 + t, -2.f, 2.f);
    Tensor bias = Tensor::rand_uniform({N}, DType::f32, 41 + t, -2.f, 2.f);
    Tensor c = c0.clone();
    gemm(a, b, c, opt, &bias);
    Tensor c64 = c0.to(DType::f64);
    Tensor bias64 = bias.to(DType::f64);
    ref::gemm(a.to(DType::f64), b.to(DType::f64), c64, opt, &bias64);
    const double scale = 0.5 * (4.0 / 3.0) * std::sqrt(double(K)) + 2.0 + 2.0;
    EXPECT_TRUE(
        all_close(c64, c, default_tolerance(DType::f32, K, scale), "f32 vs f64 t=" + std::to_string(t)));
  }
}

// The f64 reference on a case small enough to check by hand, through the public gemm (f64 runs the
// reference), with a transposed b, alpha, beta and bias.
TEST(gemm, F64ReferenceExact) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);     // (M=2, K=3)
  Tensor b = Tensor::from_vector({1, 0, -1, 2, 1, 0.5}, {2, 3}, DType::f64);  // (N=2, K=3) -> b^T
  Tensor c = Tensor::from_vector({10, 20, 30, 40}, {2, 2}, DType::f64);
  Tensor bias = Tensor::from_vector({0.25, -0.25}, {2}, DType::f64);
  GemmOptions opt;
  opt.trans_b = true;
  opt.alpha = 2.f;
  opt.beta = 0.5f;
  gemm(a, b, c, opt, &bias);
  // a @ b^T = [[1-3, 2+2+1.5], [4-6, 8+5+3]] = [[-2, 5.5], [-2, 16]]
  const std::vector<double> want = {2 * -2.0 + 5 + 0.25, 2 * 5.5 + 10 - 0.25, 2 * -2.0 + 15 + 0.25,
                                    2 * 16.0 + 20 - 0.25};
  EXPECT_EQ(c.to_doubles(), want);
}

TEST(gemm, MatmulAllocates) {
  Tensor a = Tensor::rand_uniform({3, 17, 5}, DType::bf16, 1, -1.f, 1.f);
  Tensor b = Tensor::rand_uniform({9, 5}, DType::bf16, 2, -1.f, 1.f);
  Tensor c = matmul(a, b, false, true, DType::f32);
  EXPECT_EQ(c.shape(), (Shape{3, 17, 9}));
  EXPECT_EQ(c.dtype(), DType::f32);
  Tensor r = Tensor::empty({3, 17, 9}, DType::f32);
  GemmOptions opt;
  opt.trans_b = true;
  ref::gemm(a, b, r, opt, nullptr);
  EXPECT_TRUE(all_close(r, c, default_tolerance(DType::f32, 5, 5.0), "matmul"));
}

// A training step repeats the same shapes: after the first call, no primitive is created.
TEST(gemm, SteadyStateCreatesNoPrimitives) {
  if (force_reference()) GTEST_SKIP() << "MIXTRAIN_FORCE_REFERENCE: oneDNN is not used";
  Tensor a = Tensor::rand_uniform({64, 48}, DType::bf16, 3);
  Tensor b = Tensor::rand_uniform({32, 48}, DType::bf16, 4);
  Tensor c = Tensor::empty({64, 32}, DType::bf16);
  Tensor bias = Tensor::rand_uniform({32}, DType::f32, 5);
  GemmOptions opt;
  opt.trans_b = true;
  opt.beta = 1.f;
  c.zero();
  gemm(a, b, c, opt, &bias);
  const GemmCacheStats before = gemm_cache_stats();
  for (int i = 0; i < 5; ++i) gemm(a, b, c, opt, &bias);
  const GemmCacheStats after = gemm_cache_stats();
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_GE(after.hits, before.hits + 5);
}

TEST(gemm, ForceReferenceGivesReferenceBits) {
  Tensor a = Tensor::rand_uniform({33, 65}, DType::bf16, 6);
  Tensor b = Tensor::rand_uniform({65, 17}, DType::bf16, 7);
  Tensor c1 = Tensor::empty({33, 17}, DType::f32), c2 = Tensor::empty({33, 17}, DType::f32);
  const bool was = force_reference();
  set_force_reference(true);
  gemm(a, b, c1);
  set_force_reference(was);
  ref::gemm(a, b, c2, {}, nullptr);
  EXPECT_EQ(c1.to_floats(), c2.to_floats());
}

TEST(gemm, InfoNamesImplementations) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const std::string s = gemm_impl_name(t);
    EXPECT_FALSE(s.empty());
    if (!force_reference()) {
      EXPECT_EQ(s.find("ref"), std::string::npos) << dtype_name(t) << ": " << s;
    }
  }
  if (force_reference()) return;
  const CpuFeatures& f = cpu_features();
  if (std::getenv("MIXTRAIN_F16_GEMM") != nullptr) {
    // a forced fp16 route: F16SplitIsExact and F16RoutesMatchReference cover each
  } else if (!f.avx512_fp16) {
    EXPECT_TRUE(gemm_converts_to_f32(DType::f16));
    EXPECT_NE(gemm_impl_name(DType::f16).find("fp16 converted to fp32"), std::string::npos);
  } else if (onednn_version().rfind("2.", 0) != 0) {  // oneDNN 3.x: an fp16 matmul on avx512_fp16
    EXPECT_FALSE(gemm_converts_to_f32(DType::f16)) << gemm_impl_name(DType::f16);
  }
  // The bf16 route: the fp32 kernel on Intel without AMX (the measured rule), else oneDNN's bf16.
  const bool via_f32 = f.intel && f.avx512_bf16 && !f.amx_bf16;
  if (std::getenv("MIXTRAIN_BF16_GEMM") == nullptr && f.avx512_bf16) {
    EXPECT_EQ(gemm_converts_to_f32(DType::bf16), via_f32) << gemm_impl_name(DType::bf16);
    // oneDNN names its AMX kernel "avx512_core_amx" (3.x) or "avx512_core_amx_bf16" (2.x).
    const char* want = via_f32      ? "bf16 converted to fp32"
                       : f.amx_bf16 ? "avx512_core_amx"
                                    : "avx512_core_bf16";
    EXPECT_EQ(gemm_impl_name(DType::bf16).find(want) != std::string::npos, true)
        << gemm_impl_name(DType::bf16);
  }
}

// A GEMM route against the reference, with every layout the model takes: either operand
// transposed, a batch with the weights shared or not, a bias, beta, a 16-bit output.
void expect_route_matches_reference(DType in, const char* route) {
  struct Case {
    int64_t batch, m, n, k;
    bool ta, tb, bias, batched_b;
    float beta;
    bool out16;  // the output in the input dtype (else f32)
  };
  const Case cases[] = {{1, 37, 29, 70, false, false, false, false, 0.f, false},
                        {1, 37, 29, 70, true, false, true, false, 0.f, false},
                        {1, 64, 48, 33, false, true, false, false, 1.f, false},
                        {1, 17, 65, 40, true, true, true, false, 0.f, true},
                        {3, 20, 24, 36, false, true, false, true, 0.f, false},
                        {3, 20, 24, 36, true, false, false, false, 0.f, true}};
  for (const Case& c : cases) {
    const auto shape = [&](int64_t r, int64_t cols, bool batched) {
      return batched && c.batch > 1 ? Shape{c.batch, r, cols} : Shape{r, cols};
    };
    const DType out = c.out16 ? in : DType::f32;
    Tensor a = Tensor::rand_uniform(c.ta ? shape(c.k, c.m, true) : shape(c.m, c.k, true), in, 11, -2.f, 2.f);
    Tensor b = Tensor::rand_uniform(c.tb ? shape(c.n, c.k, c.batched_b) : shape(c.k, c.n, c.batched_b), in,
                                    12, -2.f, 2.f);
    Tensor bias = Tensor::rand_uniform({c.n}, DType::f32, 13, -2.f, 2.f);
    Tensor init = Tensor::rand_uniform(shape(c.m, c.n, true), out, 14, -2.f, 2.f);
    Tensor got = init.clone(), want = init.clone();
    GemmOptions opt;
    opt.trans_a = c.ta;
    opt.trans_b = c.tb;
    opt.beta = c.beta;
    gemm(a, b, got, opt, c.bias ? &bias : nullptr);
    ref::gemm(a, b, want, opt, c.bias ? &bias : nullptr);
    const std::vector<float> g = got.to_floats(), w = want.to_floats();
    const float tol = out == DType::bf16 ? 1e-2f : out == DType::f16 ? 2e-3f : 1e-4f;
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], w[i], tol * (1.f + std::fabs(w[i])))
          << dtype_name(in) << " route " << route << " case m=" << c.m << " batch " << c.batch << " at " << i;
  }
}

// Both bf16 routes (oneDNN's bf16 kernel, the exact conversion to the fp32 kernel) agree with the
// reference.
TEST(gemm, Bf16RoutesMatchReference) {
  if (force_reference()) GTEST_SKIP() << "MIXTRAIN_FORCE_REFERENCE: only the reference runs";
  cpu::set_bf16_gemm_route(cpu::Bf16GemmRoute::native);
  expect_route_matches_reference(DType::bf16, "native");
  cpu::set_bf16_gemm_route(cpu::Bf16GemmRoute::via_f32);
  expect_route_matches_reference(DType::bf16, "fp32");
  cpu::set_bf16_gemm_route(cpu::Bf16GemmRoute::automatic);
}

// Every fp16 route (oneDNN's fp16 kernel, the exact conversion to fp32, the split into bf16 hi + lo
// parts on the bf16 kernel) agrees with the reference.
TEST(gemm, F16RoutesMatchReference) {
  if (force_reference()) GTEST_SKIP() << "MIXTRAIN_FORCE_REFERENCE: only the reference runs";
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::native);
  expect_route_matches_reference(DType::f16, "native");
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::via_f32);
  expect_route_matches_reference(DType::f16, "fp32");
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::bf16x4);
  expect_route_matches_reference(DType::f16, "bf16x4");
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::automatic);
}

// The split route is exact: with K = 1 every output is one product, which each route must give as
// fp32 computes it (the product of two fp16 values is exact in fp32), for fp16 values across the
// whole range: the largest (65504), subnormals (2^-24 .. 2^-14), values whose bf16 rounding carries
// into the next binade, random ones.
TEST(gemm, F16SplitIsExact) {
  if (force_reference()) GTEST_SKIP() << "MIXTRAIN_FORCE_REFERENCE: only the reference runs";
  std::vector<float> v = {65504.f,
                          -65504.f,
                          std::ldexp(1.f, -24),
                          -std::ldexp(3.f, -24),
                          std::ldexp(1023.f, -24),
                          std::ldexp(1.f, -14),
                          1.f + std::ldexp(1.f, -10),
                          2047.f / 1024.f,
                          -1.99951171875f,
                          0.f,
                          3.140625f,
                          1000.5f};
  const Tensor r = Tensor::rand_uniform({52}, DType::f16, 7, -300.f, 300.f);
  for (float x : r.to_floats()) v.push_back(x);
  const int64_t n = static_cast<int64_t>(v.size());
  const Tensor a = Tensor::from_floats(v, {n, 1}, DType::f16), b = Tensor::from_floats(v, {1, n}, DType::f16);
  const std::vector<float> x = a.to_floats();  // the fp16 values as floats
  for (cpu::F16GemmRoute route :
       {cpu::F16GemmRoute::native, cpu::F16GemmRoute::via_f32, cpu::F16GemmRoute::bf16x4}) {
    cpu::set_f16_gemm_route(route);
    Tensor c = Tensor::zeros({n, n}, DType::f32);
    gemm(a, b, c);
    const std::vector<float> got = c.to_floats();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(got[size_t(i * n + j)], x[size_t(i)] * x[size_t(j)])
            << "route " << static_cast<int>(route) << ": " << x[size_t(i)] << " * " << x[size_t(j)];
  }
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::automatic);
  // info names the route: the split only on request (MIXTRAIN_F16_GEMM=bf16x4).
  // A CPU without a bf16 GEMM kernel (AVX2 only: oneDNN offers only its reference bf16 matmul, and
  // bf16 inputs are converted to fp32) has nothing to split into: the request falls back to fp32.
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::bf16x4);
  if (gemm_converts_to_f32(DType::bf16)) {
    EXPECT_FALSE(gemm_splits_f16_into_bf16()) << gemm_impl_name(DType::f16);
  } else {
    EXPECT_TRUE(gemm_splits_f16_into_bf16());
    EXPECT_NE(gemm_impl_name(DType::f16).find("split into bf16"), std::string::npos)
        << gemm_impl_name(DType::f16);
  }
  cpu::set_f16_gemm_route(cpu::F16GemmRoute::automatic);
  if (std::getenv("MIXTRAIN_F16_GEMM") == nullptr) {
    EXPECT_FALSE(gemm_splits_f16_into_bf16()) << gemm_impl_name(DType::f16);
  }
}

// --matmul-precision: high is highest (no TF32/bf16x3 kernel on CPUs); medium is highest bit for bit
// where the route says oneDNN keeps the fp32 kernel, and within bf16 input rounding of the
// reference where it says bf16 products; 16-bit GEMMs are untouched by it; the scope restores.
TEST(gemm, MatmulPrecisionDoesWhatItsRouteSays) {
  if (force_reference()) GTEST_SKIP() << "MIXTRAIN_FORCE_REFERENCE: only the reference runs";
  const int64_t m = 96, n = 80, k = 300;
  const Tensor a = Tensor::rand_uniform({m, k}, DType::f32, 21, -1.f, 1.f);
  const Tensor b = Tensor::rand_uniform({k, n}, DType::f32, 22, -1.f, 1.f);
  const auto run = [&](MatmulPrecision p, DType t) {
    const MatmulPrecisionScope scope(p);
    Tensor c = Tensor::zeros({m, n}, DType::f32);
    gemm(a.to(t), b.to(t), c);
    return c.to_floats();
  };
  const std::vector<float> highest = run(MatmulPrecision::highest, DType::f32);
  EXPECT_EQ(run(MatmulPrecision::high, DType::f32), highest);
  EXPECT_EQ(run(MatmulPrecision::medium, DType::bf16), run(MatmulPrecision::highest, DType::bf16));
  const std::vector<float> medium = run(MatmulPrecision::medium, DType::f32);
  EXPECT_EQ(float32_matmul_precision(), MatmulPrecision::highest);  // restored
  if (!matmul_precision_uses_bf16(MatmulPrecision::medium)) {
    EXPECT_EQ(medium, highest) << matmul_precision_route(MatmulPrecision::medium);
    return;
  }
  Tensor want = Tensor::zeros({m, n}, DType::f32);
  ref::gemm(a, b, want, {}, nullptr);
  const std::vector<float> w = want.to_floats();
  EXPECT_NE(medium, highest) << "medium claims bf16 products but gives fp32's bits";
  for (size_t i = 0; i < w.size(); ++i)  // |sum| of 300 products of two bf16 roundings (2^-8 each)
    ASSERT_NEAR(medium[i], w[i], 300 * 2 * 0.0040f) << i;
}

// Several threads calling gemm at once (cache lookups, per-thread scratch and streams) each get
// the reference result.
TEST(gemm, ConcurrentCallsAgree) {
  constexpr int kThreads = 4;
  std::vector<Tensor> as, bs, outs, refs;
  for (int t = 0; t < kThreads; ++t) {
    const int64_t m = 17 + 16 * t, n = 33, k = 65;
    as.push_back(Tensor::rand_uniform({m, k}, t % 2 ? DType::bf16 : DType::f16, 50 + t, -1.f, 1.f));
    bs.push_back(Tensor::rand_uniform({k, n}, as.back().dtype(), 60 + t, -1.f, 1.f));
    outs.push_back(Tensor::empty({m, n}, DType::f32));
    refs.push_back(Tensor::empty({m, n}, DType::f32));
    ref::gemm(as[t], bs[t], refs[t], {}, nullptr);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) gemm(as[t], bs[t], outs[t]);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_TRUE(
        all_close(refs[t], outs[t], default_tolerance(DType::f32, 65, 8.0), "thread " + std::to_string(t)));
}

// Zero sizes: nothing to multiply (K = 0 leaves beta * c + bias), no crash.
TEST(gemm, ZeroSizes) {
  Tensor a = Tensor::empty({4, 0}, DType::f32), b = Tensor::empty({0, 3}, DType::f32);
  Tensor c = Tensor::full({4, 3}, DType::f32, 2.0);
  GemmOptions opt;
  opt.beta = 0.5f;
  gemm(a, b, c, opt);
  for (float v : c.to_floats()) EXPECT_EQ(v, 1.f);
  Tensor e = matmul(Tensor::empty({0, 5}, DType::bf16), Tensor::empty({5, 7}, DType::bf16), false, false,
                    DType::f32);
  EXPECT_EQ(e.shape(), (Shape{0, 7}));
}

}  // namespace
}  // namespace mixtrain::test
