// Quantization kernels (kernels/quantize.h): every fast kernel against its scalar reference bit
// for bit (the same formula, kernels/quant_formula.h: codes, scales, the integer GEMM and the
// epilogue), over odd and large sizes, strided inputs, every input / output dtype, rows that are
// zero, hold inf or NaN, or land on rounding ties; the int8 GEMM on each route this CPU has; and
// the definitions themselves on values worked out by hand.
#include "mixtrain/kernels/quantize.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd_forms.h"
#include "kernels/ops/op_harness.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain::test {
namespace {

constexpr Tolerance kExact{0.0, 0.0};

// Random float rows with planted special rows: row 0 all zero, row 1 with a NaN, row 2 with an
// inf (when there are that many rows), row 3 of exact halves of the int8 grid (ties).
Tensor make_rows(int64_t R, int64_t C, DType t, uint64_t seed, bool strided) {
  Tensor x = make_input({R, C}, t, seed, strided, -3.f, 3.f);
  Tensor row;
  if (R > 4 && C > 2) {
    x.select(0, 0).fill(0.0);
    x.select(0, 1).slice(0, 1, 2).fill(std::numeric_limits<double>::quiet_NaN());
    x.select(0, 2).slice(0, 0, 1).fill(std::numeric_limits<double>::infinity());
    // amax 127 exactly: mul = 1, and the values k + 0.5 are ties (exact in every input dtype).
    std::vector<double> v(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) v[size_t(c)] = c == 0 ? 127.0 : (double((c * 7) % 100) - 50.0) + 0.5;
    x.select(0, 3).copy_from(Tensor::from_vector(v, {C}, DType::f64));
  }
  return x;
}

// sizes = {R, C, portable}; in: x's dtype; out: the codes' dtype.
struct QuantizeRowsTest : OpTest {
  std::string name() const override { return "quantize_rows"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    for (auto [R, C] : {std::pair{1, 1}, std::pair{3, 5}, std::pair{9, 17}, std::pair{33, 1003},
                        std::pair{6, 4096}, std::pair{0, 8}, std::pair{512, 384}})
      for (DType in : {DType::f32, DType::bf16, DType::f16})
        for (DType out : {DType::i8, DType::f8_e4m3})
          for (bool strided : {false, true})
            for (int64_t portable : {0, 1}) {  // 1: the portable loops where the CPU has AVX-512 too
              OpConfig k;
              k.sizes = {R, C, portable};
              k.in = in;
              k.out = out;
              k.non_contiguous = strided;
              k.seed = seed++;
              k.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) +
                        " R=" + std::to_string(R) + " C=" + std::to_string(C) + (strided ? " strided" : "") +
                        (portable ? " portable" : "");
              c.push_back(k);
            }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t R = cfg.sizes[0], C = cfg.sizes[1];
    const Tensor x = make_rows(R, C, cfg.in, cfg.seed, cfg.non_contiguous);
    Tensor q = Tensor::full({R, C}, cfg.out, 3.0);
    Tensor s = Tensor::full({R}, DType::f32, -1.0);
    cpu::set_portable_forms_only(cfg.sizes[2] != 0);
    (reference ? ref::quantize_rows : mixtrain::quantize_rows)(x, q, s);
    cpu::set_portable_forms_only(false);
    return {q, s};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
bool large(const OpConfig& cfg) { return cfg.sizes[0] * cfg.sizes[1] >= 100000; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(QuantizeRowsTest, large);

// Codes and scales as quantize_rows makes them (the reference), for the dequantizing ops.
std::pair<Tensor, Tensor> make_codes(int64_t R, int64_t C, DType codes, uint64_t seed) {
  const Tensor x = Tensor::rand_uniform({R, C}, DType::f32, seed, -5.f, 5.f);
  Tensor q = Tensor::empty({R, C}, codes), s = Tensor::empty({R}, DType::f32);
  ref::quantize_rows(x, q, s);
  return {q, s};
}

// sizes = {R, C}; in: the codes' dtype; out: the output's.
struct DequantizeRowsTest : OpTest {
  std::string name() const override { return "dequantize_rows"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 100;
    for (auto [R, C] : {std::pair{1, 1}, std::pair{7, 13}, std::pair{64, 1003}, std::pair{300, 384}})
      for (DType in : {DType::i8, DType::f8_e4m3})
        for (DType out : {DType::f32, DType::bf16, DType::f16}) {
          OpConfig k;
          k.sizes = {R, C};
          k.in = in;
          k.out = out;
          k.seed = seed++;
          k.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) +
                    " R=" + std::to_string(R) + " C=" + std::to_string(C);
          c.push_back(k);
        }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const auto [q, s] = make_codes(cfg.sizes[0], cfg.sizes[1], cfg.in, cfg.seed);
    Tensor out = Tensor::empty({cfg.sizes[0], cfg.sizes[1]}, cfg.out);
    (reference ? ref::dequantize_rows : mixtrain::dequantize_rows)(q, s, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(DequantizeRowsTest, large);

// sizes = {V, C, R}: a quantized table (V, C), R ids.
struct EmbeddingDequantizedTest : OpTest {
  std::string name() const override { return "embedding_dequantized"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 200;
    for (auto [V, C, R] : {std::tuple{1, 1, 1}, std::tuple{50, 17, 33}, std::tuple{1000, 384, 512}})
      for (DType in : {DType::i8, DType::f8_e4m3})
        for (DType out : {DType::f32, DType::bf16}) {
          OpConfig k;
          k.sizes = {V, C, R};
          k.in = in;
          k.out = out;
          k.seed = seed++;
          k.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) +
                    " V=" + std::to_string(V) + " C=" + std::to_string(C) + " R=" + std::to_string(R);
          c.push_back(k);
        }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t V = cfg.sizes[0], C = cfg.sizes[1], R = cfg.sizes[2];
    const auto [q, s] = make_codes(V, C, cfg.in, cfg.seed);
    std::vector<int32_t> ids(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) ids[size_t(r)] = int32_t((r * 7919 + int64_t(cfg.seed)) % V);
    const Tensor id = Tensor::from_ints(ids, {R});
    Tensor out = Tensor::empty({R, C}, cfg.out);
    (reference ? ref::embedding_dequantized : mixtrain::embedding_dequantized)(q, s, id, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
bool large_table(const OpConfig& cfg) { return cfg.sizes[1] * cfg.sizes[2] >= 100000; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(EmbeddingDequantizedTest, large_table);

// Full-range int8 (-128 .. 127), with runs of the extremes.
Tensor make_s8(int64_t r, int64_t c, uint64_t seed) {
  std::vector<double> v(size_t(r * c));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < v.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t u = int64_t((s >> 33) % 256) - 128;
    v[i] = (i / 97) % 5 == 0 ? (u < 0 ? -128 : 127) : double(u);
  }
  return Tensor::from_vector(v, {r, c}, DType::i8);
}

enum S8Flags { kViaF32 = 1, kOnednn = 2 };

// sizes = {M, N, K}; flags: the route forced (kViaF32 / kOnednn) or the automatic one (0).
struct GemmS8Test : OpTest {
  std::string name() const override { return "gemm_s8"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 300;
    const CpuFeatures& f = cpu_features();
    // oneDNN's s8 kernels are exact only with int32 dot-product units (kernels/quantize.h): the
    // route is tested where the CPU has them, and named as not tested elsewhere.
    const bool dot_units = f.avx512_vnni || f.avx_vnni || f.amx_int8;
    std::vector<int> routes = {0, kViaF32};
    if (dot_units) routes.push_back(kOnednn);
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{1, 384, 384}, std::tuple{7, 33, 65},
                           std::tuple{64, 384, 1536}, std::tuple{17, 40, 2500}, std::tuple{128, 96, 1024}})
      for (int route : routes) {
        OpConfig k;
        k.sizes = {M, N, K};
        k.flags = route;
        k.seed = seed++;
        k.label = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                  (route == kViaF32   ? " via fp32"
                   : route == kOnednn ? " oneDNN s8"
                                      : " automatic");
        c.push_back(k);
      }
    if (!dot_units) std::printf("gemm_s8: oneDNN's s8 route not tested: this CPU has no VNNI or AMX-INT8\n");
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t M = cfg.sizes[0], N = cfg.sizes[1], K = cfg.sizes[2];
    const Tensor a = make_s8(M, K, cfg.seed), b = make_s8(N, K, cfg.seed + 1);
    Tensor acc = Tensor::full({M, N}, DType::i32, 7.0);
    if (reference) {
      ref::gemm_s8(a, b, acc);
      return {acc};
    }
    cpu::set_s8_gemm_route(cfg.flags == kViaF32   ? cpu::S8GemmRoute::via_f32
                           : cfg.flags == kOnednn ? cpu::S8GemmRoute::onednn
                                                  : cpu::S8GemmRoute::automatic);
    mixtrain::gemm_s8(a, b, acc);
    cpu::set_s8_gemm_route(cpu::S8GemmRoute::automatic);
    return {acc};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
bool large_gemm(const OpConfig& cfg) { return cfg.sizes[0] * cfg.sizes[1] >= 4096; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(GemmS8Test, large_gemm);

enum EpilogueFlags { kBias = 1, kF32Acc = 2 };

// sizes = {M, N}; out: the output dtype; flags: a bias, an f32 accumulator.
struct DequantizeGemmTest : OpTest {
  std::string name() const override { return "dequantize_gemm"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 400;
    for (auto [M, N] : {std::pair{1, 1}, std::pair{5, 33}, std::pair{64, 1536}, std::pair{300, 384}})
      for (DType out : {DType::f32, DType::bf16, DType::f16})
        for (int flags : {0, int(kBias), int(kF32Acc), int(kBias | kF32Acc)}) {
          OpConfig k;
          k.sizes = {M, N};
          k.out = out;
          k.flags = flags;
          k.seed = seed++;
          k.label = std::string(flags & kF32Acc ? "f32" : "i32") + "->" + std::string(dtype_name(out)) +
                    " M=" + std::to_string(M) + " N=" + std::to_string(N) + (flags & kBias ? " bias" : "");
          c.push_back(k);
        }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t M = cfg.sizes[0], N = cfg.sizes[1];
    // Accumulators past 2^24 too (their conversion to float rounds, the same way on both sides).
    const Tensor acc32 = Tensor::rand_uniform({M, N}, DType::f32, cfg.seed, -4e7f, 4e7f);
    const Tensor acc = (cfg.flags & kF32Acc) ? acc32 : acc32.to(DType::i32);
    const Tensor rs = Tensor::rand_uniform({M}, DType::f32, cfg.seed + 1, 1e-4f, 1e-2f);
    const Tensor cs = Tensor::rand_uniform({N}, DType::f32, cfg.seed + 2, 1e-4f, 1e-2f);
    const Tensor bias = Tensor::rand_uniform({N}, DType::f32, cfg.seed + 3, -1.f, 1.f);
    Tensor out = Tensor::empty({M, N}, cfg.out);
    (reference ? ref::dequantize_gemm : mixtrain::dequantize_gemm)(
        acc, rs, cs, (cfg.flags & kBias) ? &bias : nullptr, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
bool large_epilogue(const OpConfig& cfg) { return cfg.sizes[0] * cfg.sizes[1] >= 65536; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(DequantizeGemmTest, large_epilogue);

enum FusedFlags { kFusedBias = 1, kPow2Scales = 2, kFusedViaF32 = 4, kFusedGelu = 8 };

// sizes = {M, N, K}; out: the output dtype; flags: a bias, power-of-two scales, the fp32 route
// forced (the two ops composed) instead of the automatic one (oneDNN's epilogue where its s8
// matmul runs). With power-of-two scales every product in either order is exact, so the fused
// epilogue must give the definition's bits; with any scales, within a few fp32 ulps of the largest
// product before out's rounding (kernels/quantize.h).
struct GemmS8DequantizedTest : OpTest {
  std::string name() const override { return "gemm_s8_dequantized"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 500;
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{1, 384, 384}, std::tuple{7, 33, 65},
                           std::tuple{64, 384, 512}, std::tuple{17, 40, 1100}, std::tuple{129, 96, 256}})
      for (DType out : {DType::f32, DType::bf16, DType::f16})
        for (int flags : {0, int(kFusedBias), int(kPow2Scales), int(kFusedBias | kPow2Scales),
                          int(kFusedBias | kFusedViaF32), int(kFusedBias | kFusedGelu),
                          int(kFusedBias | kFusedGelu | kFusedViaF32)}) {
          OpConfig k;
          k.sizes = {M, N, K};
          k.out = out;
          k.flags = flags;
          k.seed = seed++;
          k.label = std::string("->") + std::string(dtype_name(out)) + " M=" + std::to_string(M) +
                    " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                    (flags & kFusedBias ? " bias" : "") + (flags & kPow2Scales ? " pow2 scales" : "") +
                    (flags & kFusedViaF32 ? " via fp32" : "") + (flags & kFusedGelu ? " gelu" : "");
          c.push_back(k);
        }
    return c;
  }
  // Scales in [2^-12, 2^-6]: powers of two, or any values there.
  static Tensor scales(int64_t n, uint64_t seed, bool pow2) {
    const Tensor u = Tensor::rand_uniform({n}, DType::f32, seed, -12.f, -6.f);
    std::vector<double> v = u.to_doubles();
    for (double& x : v) x = pow2 ? std::ldexp(1.0, int(std::floor(x))) : std::exp2(x);
    return Tensor::from_vector(v, {n}, DType::f32);
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t M = cfg.sizes[0], N = cfg.sizes[1], K = cfg.sizes[2];
    const Tensor a = make_s8(M, K, cfg.seed), b = make_s8(N, K, cfg.seed + 1);
    const bool pow2 = cfg.flags & kPow2Scales;
    const Tensor rs = scales(M, cfg.seed + 2, pow2), cs = scales(N, cfg.seed + 3, pow2);
    const Tensor bias = Tensor::rand_uniform({N}, DType::f32, cfg.seed + 4, -1.f, 1.f);
    const Tensor* bp = (cfg.flags & kFusedBias) ? &bias : nullptr;
    Tensor out = Tensor::full({M, N}, cfg.out, 7.0);
    const bool gelu = cfg.flags & kFusedGelu;
    if (reference) {
      ref::gemm_s8_dequantized(a, b, rs, cs, bp, out, gelu);
      return {out};
    }
    if (cfg.flags & kFusedViaF32) cpu::set_s8_gemm_route(cpu::S8GemmRoute::via_f32);
    mixtrain::gemm_s8_dequantized(a, b, rs, cs, bp, out, gelu);
    cpu::set_s8_gemm_route(cpu::S8GemmRoute::automatic);
    return {out};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    const bool gelu = cfg.flags & kFusedGelu;
    if (!gelu && (cfg.flags & (kPow2Scales | kFusedViaF32))) return kExact;
    // |acc| <= K * 2^14, each scale <= 2^-6: the largest product before the bias.
    const double largest = double(cfg.sizes[2]) * 16384.0 * std::ldexp(1.0, -12);
    const double eps32 = dtype_epsilon(DType::f32);
    const double eps_out = cfg.out == DType::f32 ? 0.0 : dtype_epsilon(cfg.out);
    if (!gelu) return {4 * eps32 * largest, eps_out + 4 * eps32};
    // GELU: the reference rounds the linear's output to out's dtype and then the GELU's (one ulp
    // more), and the erfs differ: ours within 1.5 ulp, oneDNN's within ~1e-7 absolute (x/2 times
    // that in GELU, largest for the largest |x|).
    return {4 * eps32 * largest + 1e-7 * largest, 2 * eps_out + 8 * eps32};
  }
};
bool large_fused(const OpConfig& cfg) { return cfg.sizes[0] * cfg.sizes[1] >= 4096; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(GemmS8DequantizedTest, large_fused);

TEST(Quantize, TheInt8EpilogueIsInsideOnednnsMatmulWhereItsS8KernelsRun) {
  const CpuFeatures& f = cpu_features();
  const bool expected = (f.avx512_vnni || f.avx_vnni || f.amx_int8) && onednn_version().rfind("3.", 0) == 0;
  // M = 1 and M > 1: a per-row operand of a 2-D problem got oneDNN 3.2's reference kernel (and the
  // composed route silently) until the problem was framed in 3-D.
  for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{8192}})
    for (DType out : {DType::f32, DType::bf16})
      for (bool gelu : {false, true})
        EXPECT_EQ(gemm_s8_epilogue_fused(out, m, 1152, 384, gelu), expected)
            << "M=" << m << " " << dtype_name(out) << (gelu ? " gelu" : "");
  EXPECT_FALSE(gemm_s8_epilogue_fused(DType::f16, 64, 384, 384));
  if (!expected) std::printf("gemm_s8_dequantized: the fused epilogue is not used on this CPU / oneDNN\n");
}

// A model's quantized weights (MemCategory::quantized_weights) run from a copy in the kernel's own
// layout, made once (kernels/cpu/gemm_onednn.cpp: packed_weight): the same results as the plain
// weights, the copy counted as cast_cache memory, made again after the weights are written (their
// storage version bumped, as ParameterStore::mark_written does), and released with them.
TEST(Quantize, QuantizedWeightsRunFromAPackedCopyThatFollowsTheirVersion) {
  const int64_t M = 96, N = 384, K = 256;
  const Tensor x = Tensor::rand_uniform({M, K}, DType::f32, 1, -2.f, 2.f);
  Tensor a = Tensor::empty({M, K}, DType::i8), as = Tensor::empty({M}, DType::f32);
  quantize_rows(x, a, as);
  const auto weights = [&](uint64_t seed, Tensor& codes, Tensor& scales) {
    const Tensor w = Tensor::rand_uniform({N, K}, DType::f32, seed, -1.f, 1.f);
    Tensor c = Tensor::empty({N, K}, DType::i8), sc = Tensor::empty({N}, DType::f32);
    quantize_rows(w, c, sc);
    codes.copy_from(c);
    scales.copy_from(sc);
  };
  Tensor model_codes = Tensor::empty({N, K}, DType::i8, MemCategory::quantized_weights);
  Tensor plain_codes = Tensor::empty({N, K}, DType::i8);  // the same values, not a model's
  Tensor scales = Tensor::empty({N}, DType::f32);
  const Tensor bias = Tensor::rand_uniform({N}, DType::f32, 3, -1.f, 1.f);
  const auto run = [&](const Tensor& codes) {
    Tensor out = Tensor::empty({M, N}, DType::bf16);
    gemm_s8_dequantized(a, codes, as, scales, &bias, out, /*gelu_erf=*/true);
    return out;
  };
  const auto same = [](const Tensor& u, const Tensor& v) {
    return std::memcmp(u.raw_data(), v.raw_data(), u.nbytes()) == 0;
  };
  const int64_t cached_before = MemoryTracker::global().snapshot().live[size_t(MemCategory::cast_cache)];
  for (uint64_t seed : {11, 12}) {
    weights(seed, model_codes, scales);
    plain_codes.copy_from(model_codes);
    model_codes.storage()->bump_version();  // written in place: a packed copy of the old values is stale
    for (int call = 0; call < 2; ++call)
      EXPECT_TRUE(same(run(model_codes), run(plain_codes))) << seed << " " << call;
  }
  const int64_t cached =
      MemoryTracker::global().snapshot().live[size_t(MemCategory::cast_cache)] - cached_before;
  const CpuFeatures& f = cpu_features();
  if ((f.avx512_vnni || f.avx_vnni || f.amx_int8) && onednn_version().rfind("3.", 0) == 0)
    EXPECT_GE(cached, N * K);  // one packed copy (AMX and VNNI kernels block the weights)
  else
    std::printf("gemm_s8_dequantized: no s8 kernel here, nothing packed\n");
  model_codes = Tensor();  // the copy goes with the weights
  EXPECT_EQ(MemoryTracker::global().snapshot().live[size_t(MemCategory::cast_cache)], cached_before);
}

// ---- the definitions on values worked out by hand ----------------------------------------------

TEST(Quantize, Int8RowIsSymmetricRoundHalfEvenOverAmaxOver127) {
  // amax 2: scale 2/127, multiplier 63.5; 1 * 63.5 = 63.5 is a tie -> 64 (even); 0.5 * 63.5 =
  // 31.75 -> 32; -2 -> -127; 0.3 * 63.5 = 19.05 -> 19.
  const Tensor x = Tensor::from_vector({1.0, -2.0, 0.5, 0.3}, {1, 4}, DType::f32);
  Tensor q = Tensor::empty({1, 4}, DType::i8), s = Tensor::empty({1}, DType::f32);
  quantize_rows(x, q, s);
  EXPECT_EQ(q.to_doubles(), (std::vector<double>{64, -127, 32, 19}));
  EXPECT_EQ(s.to_floats()[0], 2.f / 127.f);
}

TEST(Quantize, E4m3RowScalesAmaxTo448AndSaturates) {
  // amax 448: multiplier 1, the codes are the values' E4M3 roundings (17 -> 16, a tie to even);
  // amax 1: multiplier 448, 1 -> 448 exactly, 0.001 * 448 = 0.448 -> 0.4375.
  Tensor x = Tensor::from_vector({448.0, 17.0, -3.0, 0.0, 1.0, 0.001, -1.0, 0.5}, {2, 4}, DType::f32);
  Tensor q = Tensor::empty({2, 4}, DType::f8_e4m3), s = Tensor::empty({2}, DType::f32);
  quantize_rows(x, q, s);
  EXPECT_EQ(q.to_doubles(), (std::vector<double>{448, 16, -3, 0, 448, 0.4375, -448, 224}));
  EXPECT_EQ(s.to_floats(), (std::vector<float>{1.f, 1.f / 448.f}));
}

TEST(Quantize, ZeroRowGetsScaleOneAndNonFiniteRowScaleNan) {
  Tensor x = Tensor::from_vector({0, 0, 0, 1, std::nan(""), 2, -INFINITY, 1, 1}, {3, 3}, DType::f32);
  for (DType t : {DType::i8, DType::f8_e4m3}) {
    Tensor q = Tensor::full({3, 3}, t, 1.0), s = Tensor::empty({3}, DType::f32);
    quantize_rows(x, q, s);
    const std::vector<float> sc = s.to_floats();
    EXPECT_EQ(sc[0], 1.f);
    EXPECT_TRUE(std::isnan(sc[1]));
    EXPECT_TRUE(std::isnan(sc[2]));
    EXPECT_EQ(q.to_doubles(), std::vector<double>(9, 0.0)) << dtype_name(t);
    // Dequantized: the zero row is zeros, the others NaN (never silently zero).
    Tensor d = Tensor::empty({3, 3}, DType::f32);
    dequantize_rows(q, s, d);
    const std::vector<float> v = d.to_floats();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(v[size_t(i)], 0.f);
    for (int i = 3; i < 9; ++i) EXPECT_TRUE(std::isnan(v[size_t(i)]));
  }
}

TEST(Quantize, GemmS8IsExactAtTheExtremesOnEveryRoute) {
  // -128 * -128 summed over K: 2^24 at K = 1024 (the fp32 route's block), 2^26 at K = 4096.
  for (int64_t K : {1024, 1025, 4096}) {
    const Tensor a = Tensor::full({3, K}, DType::i8, -128.0), b = Tensor::full({2, K}, DType::i8, -128.0);
    const Tensor c = Tensor::full({2, K}, DType::i8, 127.0);
    for (cpu::S8GemmRoute r : {cpu::S8GemmRoute::automatic, cpu::S8GemmRoute::via_f32}) {
      cpu::set_s8_gemm_route(r);
      Tensor acc = Tensor::empty({3, 2}, DType::i32);
      gemm_s8(a, b, acc);
      EXPECT_EQ(acc.to_ints(), std::vector<int32_t>(6, int32_t(16384 * K))) << "K=" << K;
      gemm_s8(a, c, acc);
      EXPECT_EQ(acc.to_ints(), std::vector<int32_t>(6, int32_t(-128 * 127 * K))) << "K=" << K;
    }
    cpu::set_s8_gemm_route(cpu::S8GemmRoute::automatic);
  }
}

TEST(Quantize, BadArgumentsNameTheOpAndTheTensor) {
  Tensor x = Tensor::zeros({2, 3}, DType::f32), q = Tensor::empty({2, 3}, DType::f16),
         s = Tensor::empty({2}, DType::f32);
  EXPECT_THROW(quantize_rows(x, q, s), DTypeError);
  Tensor q8 = Tensor::empty({2, 4}, DType::i8);
  EXPECT_THROW(quantize_rows(x, q8, s), ShapeError);
  Tensor acc = Tensor::empty({2, 2}, DType::i32);
  EXPECT_THROW(gemm_s8(Tensor::empty({2, 3}, DType::i8), Tensor::empty({2, 4}, DType::i8), acc), ShapeError);
  const Tensor a8 = Tensor::zeros({2, 3}, DType::i8), rs = Tensor::full({2}, DType::f32, 1.0);
  Tensor out2 = Tensor::empty({2, 2}, DType::f32);
  EXPECT_THROW(gemm_s8_dequantized(a8, a8, rs, Tensor::full({3}, DType::f32, 1.0), nullptr, out2),
               ShapeError);
  EXPECT_THROW(gemm_s8_dequantized(a8, a8, rs, rs, nullptr, acc), DTypeError);
  const Tensor table = Tensor::zeros({4, 3}, DType::i8), ts = Tensor::full({4}, DType::f32, 1.0);
  Tensor out = Tensor::empty({1, 3}, DType::f32);
  try {
    embedding_dequantized(table, ts, Tensor::from_ints({4}, {1}), out);
    ADD_FAILURE() << "an id past the table was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("id 4 at position 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixtrain::test
