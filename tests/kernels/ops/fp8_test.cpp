// The fp8 recipes' quantization (kernels/fp8.h): the fast kernel against the scalar reference bit
// for bit (op harness: every recipe's block shape and rule, both formats, every input and output
// kind, strided inputs, blocks that are zero or hold inf or NaN, ragged edge blocks, 1 vs 2
// threads); the fast kernel's branch-free cast against numeric/fp8.h's cast on every bf16 input
// and on random fp32 bit patterns; and each recipe's quantization of every finite bf16 value
// against a plain implementation of its published definition (scales in double, the cast as the
// nearest fp8 value found by search).
#include "mixtrain/kernels/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp8_rows.h"
#include "kernels/cpu/simd_forms.h"
#include "kernels/fp8_formula.h"
#include "kernels/ops/op_harness.h"
#include "mixtrain/core/error.h"
#include "mixtrain/numeric/bf16.h"

namespace mixtrain::test {
namespace {

constexpr Tolerance kExact{0.0, 0.0};

struct Recipe {
  const char* name;
  int64_t br, bc;
  Fp8ScaleRule rule;
};
// The recipes' block shapes (kernels/fp8.h's table), and their transposed uses.
const Recipe kRecipes[] = {
    {"tensor", 0, 0, Fp8ScaleRule::fp32},       {"rowwise", 1, 0, Fp8ScaleRule::fp32},
    {"colwise", 0, 1, Fp8ScaleRule::fp32},      {"mx", 1, 32, Fp8ScaleRule::e8m0},
    {"mx-col", 32, 1, Fp8ScaleRule::e8m0},      {"block1x128", 1, 128, Fp8ScaleRule::pow2},
    {"block128x1", 128, 1, Fp8ScaleRule::pow2}, {"block128x128", 128, 128, Fp8ScaleRule::pow2},
    {"pow2-tensor", 0, 0, Fp8ScaleRule::pow2}};

// Random rows in [-3, 3] with planted trouble: row 0 zero, a NaN in row 1, an inf in row 2, a
// tiny row 3 (amax near fp32's subnormals) and a large row 4.
Tensor make_x(int64_t R, int64_t C, DType t, uint64_t seed, bool strided) {
  Tensor x = make_input({R, C}, t, seed, strided, -3.f, 3.f);
  if (R > 6 && C > 2) {
    x.select(0, 0).fill(0.0);
    x.select(0, 1).slice(0, 1, 2).fill(std::numeric_limits<double>::quiet_NaN());
    x.select(0, 2).slice(0, 0, 1).fill(std::numeric_limits<double>::infinity());
    if (t != DType::f16) {
      x.select(0, 3).slice(0, 0, 1).fill(1e-37);
      x.select(0, 4).slice(0, 0, 2).fill(3e30);
    }
  }
  return x;
}

// sizes = {R, C, recipe index, q kind}; q kind 0: codes in the format, 1: codes as bf16,
// 2: dequantized bf16, 3: dequantized f32. cfg.out: the format.
struct Fp8QuantizeTest : OpTest {
  std::string name() const override { return "fp8_quantize"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    for (auto [R, C] :
         {std::pair{1, 1}, std::pair{5, 7}, std::pair{33, 130}, std::pair{130, 300}, std::pair{512, 384}})
      for (int64_t r = 0; r < int64_t(std::size(kRecipes)); ++r)
        for (DType fmt : {DType::f8_e4m3, DType::f8_e5m2})
          for (int64_t kind = 0; kind < 4; ++kind) {
            OpConfig k;
            k.in = (seed % 3 == 0) ? DType::f32 : (seed % 3 == 1 ? DType::bf16 : DType::f16);
            k.out = fmt;
            k.non_contiguous = seed % 2 == 0;
            k.sizes = {R, C, r, kind};
            k.seed = seed++;
            k.label = std::string(dtype_name(k.in)) + " " + kRecipes[r].name + " " +
                      std::string(dtype_name(fmt)) + " q" + std::to_string(kind) + " R=" + std::to_string(R) +
                      " C=" + std::to_string(C) + (k.non_contiguous ? " strided" : "");
            c.push_back(k);
          }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t R = cfg.sizes[0], C = cfg.sizes[1];
    const Recipe& rc = kRecipes[cfg.sizes[2]];
    const int64_t kind = cfg.sizes[3];
    Fp8Quant how;
    how.format = cfg.out;
    how.block_rows = rc.br;
    how.block_cols = rc.bc;
    how.rule = rc.rule;
    how.dequantize = kind >= 2;
    const Tensor x = make_x(R, C, cfg.in, cfg.seed, cfg.non_contiguous);
    const DType qt = kind == 0 ? cfg.out : (kind == 3 ? DType::f32 : DType::bf16);
    Tensor q = Tensor::full({R, C}, qt, 3.0);
    const int64_t br = rc.br ? rc.br : R, bc = rc.bc ? rc.bc : C;
    const Shape g{(R + br - 1) / br, (C + bc - 1) / bc};
    Tensor si = Tensor::full(g, DType::f32, -1.0), am = Tensor::full(g, DType::f32, -1.0);
    (reference ? ref::fp8_quantize : mixtrain::fp8_quantize)(x, how, nullptr, q, si, am);
    return {q, si, am};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
bool large(const OpConfig& cfg) { return cfg.sizes[0] * cfg.sizes[1] >= 100000; }
MIXTRAIN_REGISTER_OP_TEST_THREADS(Fp8QuantizeTest, large);

// Delayed scaling: the scale is given (one per block), the amax still measured.
struct Fp8QuantizeGivenScaleTest : OpTest {
  std::string name() const override { return "fp8_quantize_given_scale"; }
  std::vector<std::string> ops() const override { return {"fp8_quantize"}; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 500;
    for (auto [R, C] : {std::pair{3, 4}, std::pair{64, 200}, std::pair{300, 512}})
      for (DType fmt : {DType::f8_e4m3, DType::f8_e5m2})
        for (double s : {1.0, 0.37, 300.0, 1e6}) {  // 1e6 overflows: the cast saturates
          OpConfig k;
          k.in = DType::bf16;
          k.out = fmt;
          k.sizes = {R, C, int64_t(s * 100)};
          k.seed = seed++;
          k.label = std::string(dtype_name(fmt)) + " scale " + std::to_string(s) + " R=" + std::to_string(R) +
                    " C=" + std::to_string(C);
          c.push_back(k);
        }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t R = cfg.sizes[0], C = cfg.sizes[1];
    Fp8Quant how;
    how.format = cfg.out;
    const Tensor x = make_x(R, C, cfg.in, cfg.seed, false);
    const Tensor s = Tensor::full({1, 1}, DType::f32, double(cfg.sizes[2]) / 100.0);
    Tensor q = Tensor::full({R, C}, DType::bf16, 3.0);
    Tensor si = Tensor::full({1, 1}, DType::f32, -1.0), am = Tensor::full({1, 1}, DType::f32, -1.0);
    // Row 1's NaN would make the whole tensor NaN: take the rows after the planted ones.
    const Tensor xs = R > 6 ? x.slice(0, 5, R) : x;
    Tensor qs = q.slice(0, 0, xs.size(0));
    (reference ? ref::fp8_quantize : mixtrain::fp8_quantize)(xs, how, &s, qs, si, am);
    return {q, si, am};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
MIXTRAIN_REGISTER_OP_TEST(Fp8QuantizeGivenScaleTest);

// The quantization's error stats over what the reference quantization made: the fast kernel equal
// to the reference (counts and the double sums, bit for bit); sizes = {R, C, recipe, dequantize}.
struct Fp8QuantErrorTest : OpTest {
  std::string name() const override { return "fp8_quant_error"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 900;
    for (auto [R, C] : {std::pair{1, 1}, std::pair{33, 130}, std::pair{512, 384}})
      for (int64_t r = 0; r < int64_t(std::size(kRecipes)); ++r)
        for (DType fmt : {DType::f8_e4m3, DType::f8_e5m2}) {
          OpConfig k;
          k.in = seed % 2 ? DType::bf16 : DType::f32;
          k.out = fmt;
          k.sizes = {R, C, r, int64_t(seed % 3 == 0)};
          k.seed = seed++;
          k.label = std::string(kRecipes[r].name) + " " + std::string(dtype_name(fmt)) +
                    " R=" + std::to_string(R) + " C=" + std::to_string(C) +
                    (k.sizes[3] ? " dequantized" : "");
          c.push_back(k);
        }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t R = cfg.sizes[0], C = cfg.sizes[1];
    const Recipe& rc = kRecipes[cfg.sizes[2]];
    Fp8Quant how;
    how.format = cfg.out;
    how.block_rows = rc.br;
    how.block_cols = rc.bc;
    how.rule = rc.rule;
    how.dequantize = cfg.sizes[3] != 0;
    // Wide values (some blocks saturate under a given scale, some underflow) and the planted rows.
    Tensor x = make_x(R, C, cfg.in, cfg.seed, false);
    const int64_t br = rc.br ? rc.br : R, bc = rc.bc ? rc.bc : C;
    const Shape g{(R + br - 1) / br, (C + bc - 1) / bc};
    Tensor q = Tensor::empty({R, C}, how.dequantize ? DType::bf16 : cfg.out),
           si = Tensor::empty(g, DType::f32), am = Tensor::empty(g, DType::f32);
    ref::fp8_quantize(x, how, nullptr, q, si, am);
    Fp8ErrorStats s;
    (reference ? ref::fp8_quant_error : mixtrain::fp8_quant_error)(x, how, q, si, s);
    return {Tensor::from_vector({double(s.count), double(s.saturated), double(s.underflow), s.err2, s.ref2},
                                {5}, DType::f64)};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return kExact; }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(Fp8QuantErrorTest, large);

// Stats worked out by hand: E4M3 with a given scale of 1 (delayed scaling whose history is
// behind): 500 is clipped to 448 (saturated), 0.001 becomes a subnormal code (underflow), 1 and 0
// are exact; the squared errors add up.
TEST(Fp8Recipes, ErrorStatsByHand) {
  const Tensor x = Tensor::from_vector({500, 1, 0.001, 0}, {1, 4}, DType::f32);
  Fp8Quant how;
  const Tensor one = Tensor::full({1, 1}, DType::f32, 1.0);
  Tensor q = Tensor::empty({1, 4}, DType::f32), si = Tensor::empty({1, 1}, DType::f32),
         am = Tensor::empty({1, 1}, DType::f32);
  fp8_quantize(x, how, &one, q, si, am);
  Fp8ErrorStats s;
  fp8_quant_error(x, how, q, si, s);
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.saturated, 1);
  EXPECT_EQ(s.underflow, 1);
  const double e001 = double(f32_from_fp8_e4m3(fp8_e4m3_from_f32(0.001f))) - double(0.001f);
  EXPECT_DOUBLE_EQ(s.err2, 52.0 * 52.0 + e001 * e001);
  EXPECT_DOUBLE_EQ(s.ref2, 500.0 * 500.0 + 1.0 + double(0.001f) * double(0.001f));
}

// ---- the cast: branch-free form against numeric/fp8.h ------------------------------------------

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(Fp8Cast, FastCastEqualsTheReferenceOnEveryBf16Input) {
  for (DType f : {DType::f8_e4m3, DType::f8_e5m2}) {
    int64_t checked = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
      const float v = std::bit_cast<float>(b << 16);
      if (std::isnan(v)) continue;
      for (float s : {1.f, 0.75f, 1.f / 3.f, 448.f, 0x1p-10f}) {  // scaled, as the kernel casts x * scale
        const float w = v * s;
        ASSERT_TRUE(same_bits(fp8q::cast_value_fast(w, f), fp8q::cast_value(w, f)))
            << dtype_name(f) << " input " << w << " (bf16 bits " << b << " times " << s << ")";
        ++checked;
      }
    }
    EXPECT_GT(checked, 5 * 65000);
  }
}

TEST(Fp8Cast, FastCastEqualsTheReferenceOnRandomFp32) {
  std::mt19937 rng(7);
  for (DType f : {DType::f8_e4m3, DType::f8_e5m2})
    for (int i = 0; i < 2000000; ++i) {
      const float v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      if (std::isnan(v)) continue;
      ASSERT_TRUE(same_bits(fp8q::cast_value_fast(v, f), fp8q::cast_value(v, f)))
          << dtype_name(f) << " " << v;
    }
}

// ---- each recipe against its published definition, on every finite bf16 value ------------------

// Every finite bf16 value but the largest (whose products would overflow fp32 in the tests' own
// scaled checks), as rows of 256, in bit order (so blocks hold neighbouring magnitudes).
Tensor all_bf16() {
  std::vector<double> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = std::bit_cast<float>(b << 16);
    if (std::isfinite(f)) v.push_back(f);
  }
  v.resize(v.size() / 256 * 256);
  return Tensor::from_vector(v, {int64_t(v.size() / 256), 256}, DType::bf16);
}

// The format's finite non-negative values, ascending.
std::vector<double> fp8_values(DType f) {
  std::vector<double> v;
  for (uint32_t c = 0; c < 128; ++c) {
    const double d = f == DType::f8_e4m3 ? f32_from_fp8_e4m3(fp8_e4m3::from_bits(uint8_t(c)))
                                         : f32_from_fp8_e5m2(fp8_e5m2::from_bits(uint8_t(c)));
    if (std::isfinite(d)) v.push_back(d);
  }
  return v;
}

// Round to nearest, ties to the even code, saturating: by search over the format's values.
double nearest_fp8(double x, const std::vector<double>& vals) {
  const double a = std::fabs(x);
  if (a >= vals.back()) return std::copysign(vals.back(), x);
  size_t i = 0;
  while (vals[i + 1] <= a) ++i;  // vals[i] <= a < vals[i + 1]
  const double lo = vals[i], hi = vals[i + 1];
  double r;
  if (a - lo < hi - a)
    r = lo;
  else if (a - lo > hi - a)
    r = hi;
  else
    r = (i % 2 == 0) ? lo : hi;  // the codes ascend with the values: even index, even code
  return std::copysign(r, x);
}

// The recipe's scale for a block's amax, from the published definitions, in double.
double definition_scale(double amax, DType f, Fp8ScaleRule rule) {
  const double fmax = f == DType::f8_e4m3 ? 448.0 : 57344.0;
  if (rule == Fp8ScaleRule::e8m0) {  // OCP MX v1.0: 2^-(floor(log2 amax) - emax), E8M0's range
    if (amax == 0) return std::exp2(127.0);
    double shared = std::floor(std::log2(amax)) - (f == DType::f8_e4m3 ? 8 : 15);
    shared = std::fmin(127.0, std::fmax(-127.0, shared));
    return std::exp2(-shared);
  }
  if (amax == 0) return 1.0;
  float fs = float(fmax / amax);  // TE: fp32 division; an amax so small the scale overflows: FLT_MAX
  if (std::isinf(fs)) fs = std::numeric_limits<float>::max();
  const double s = fs;
  if (rule == Fp8ScaleRule::pow2) return std::exp2(std::floor(std::log2(s)));
  return s;
}

TEST(Fp8Recipes, EveryFiniteBf16ValueQuantizesAsTheDefinitionSays) {
  const Tensor x = all_bf16();
  const std::vector<double> xv = x.to_doubles();
  const int64_t R = x.size(0), C = x.size(1);
  for (DType f : {DType::f8_e4m3, DType::f8_e5m2}) {
    const std::vector<double> vals = fp8_values(f);
    for (const Recipe& rc : kRecipes) {
      Fp8Quant how;
      how.format = f;
      how.block_rows = rc.br;
      how.block_cols = rc.bc;
      how.rule = rc.rule;
      const int64_t br = rc.br ? rc.br : R, bc = rc.bc ? rc.bc : C;
      const int64_t nbc = (C + bc - 1) / bc;
      const Shape g{(R + br - 1) / br, nbc};
      Tensor q = Tensor::empty({R, C}, f), si = Tensor::empty(g, DType::f32),
             am = Tensor::empty(g, DType::f32);
      fp8_quantize(x, how, nullptr, q, si, am);
      const std::vector<double> qv = q.to_doubles(), sv = si.to_doubles(), av = am.to_doubles();
      std::vector<double> amax(sv.size(), 0.0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          double& m = amax[size_t((r / br) * nbc + c / bc)];
          m = std::fmax(m, std::fabs(xv[size_t(r * C + c)]));
        }
      int64_t wrong = 0;
      for (size_t b = 0; b < amax.size(); ++b) {
        ASSERT_EQ(av[b], amax[b]) << rc.name << " block " << b;
        const double s = definition_scale(amax[b], f, rc.rule);
        ASSERT_EQ(sv[b], double(1.f / float(s))) << rc.name << " " << dtype_name(f) << " block " << b;
      }
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const size_t b = size_t((r / br) * nbc + c / bc);
          // x * scale rounded to fp32 first (the recipes multiply in fp32), then to the format.
          const double xs =
              double(float(xv[size_t(r * C + c)] * float(definition_scale(amax[b], f, rc.rule))));
          if (qv[size_t(r * C + c)] != nearest_fp8(xs, vals) && wrong++ < 3)
            ADD_FAILURE() << rc.name << " " << dtype_name(f) << " x=" << xv[size_t(r * C + c)] << " code "
                          << qv[size_t(r * C + c)] << " definition " << nearest_fp8(xs, vals);
        }
      EXPECT_EQ(wrong, 0) << rc.name << " " << dtype_name(f);
    }
  }
}

// ---- the two forms of the fast kernel's row primitives (kernels/cpu/fp8_rows.h) ----------------

// Every finite bf16 value but the largest, as (255, 256) in one of three orders: 0, bit order
// along the rows (a row's short block lies within a binade or two: the AVX-512 form's 32-lane
// bf16 path); 1, bit order down the columns (the same for the column blocks, the tiniest included);
// 2, shuffled (blocks mix magnitudes, so lanes fall below fp8's normals, which that path leaves to
// its 16-lane form). The ordered ones carry a NaN, a -NaN and an inf, each making its blocks not
// finite. And 3: random bf16 values below 2^-115 (bits under 0x0600), so that blocks' scales
// come near E8M0's and pow2's largest and their fp8 normals reach down among bf16's subnormals.
Tensor all_bf16_as(DType t, int order) {
  std::vector<double> v = all_bf16().to_doubles();
  const int64_t R = int64_t(v.size() / 256), C = 256;
  std::mt19937_64 rng(7);
  if (order == 2) std::shuffle(v.begin(), v.end(), rng);
  if (order == 3)
    for (double& d : v) {
      const uint32_t bits = uint32_t(rng() % 0x0600) | (rng() % 2 ? 0x8000u : 0u);
      d = f32_from_bf16(bf16::from_bits(uint16_t(bits)));
    }
  if (order == 1) {
    const std::vector<double> rowwise = v;
    for (int64_t i = 0; i < R * C; ++i) v[size_t((i % R) * C + i / R)] = rowwise[size_t(i)];
  }
  if (order < 2) {
    v[size_t(3 * C + 5)] = std::numeric_limits<double>::quiet_NaN();
    v[size_t(70 * C + 200)] = -std::numeric_limits<double>::quiet_NaN();
    v[size_t(140 * C + 77)] = std::numeric_limits<double>::infinity();
  }
  return Tensor::from_vector(v, {R, C}, t);
}

// What a test runs under: the form fp8_quantize picks on this CPU, or the portable loops.
struct Fp8RowForm {
  explicit Fp8RowForm(bool portable) { cpu::set_portable_forms_only(portable); }
  ~Fp8RowForm() { cpu::set_portable_forms_only(false); }
};

TEST(Fp8Rows, BothFormsEqualTheReferenceOnEveryBf16Value) {
  const bool avx512 = cpu::fp8_rows_avx512() != nullptr;
  if (!avx512)
    std::cout << "[ note ] no AVX-512 here: the portable form only (the other is tested on AVX-512 CPUs)\n";
  for (bool portable : {true, false}) {
    if (!portable && !avx512) continue;
    const Fp8RowForm form(portable);
    for (int input = 0; input < 8; ++input) {
      const DType in = input % 2 ? DType::f32 : DType::bf16;
      const int order = input / 2;
      const Tensor x = all_bf16_as(in, order);
      const int64_t R = x.size(0), C = x.size(1);
      for (DType f : {DType::f8_e4m3, DType::f8_e5m2})
        for (const Recipe& rc : kRecipes)
          for (int kind = 0; kind < 4; ++kind) {  // q: codes, codes as bf16, dequantized bf16 / f32
            Fp8Quant how;
            how.format = f;
            how.block_rows = rc.br;
            how.block_cols = rc.bc;
            how.rule = rc.rule;
            how.dequantize = kind >= 2;
            const DType qt = kind == 0 ? f : (kind == 3 ? DType::f32 : DType::bf16);
            const Shape g = fp8_blocks(how, R, C).grid();
            Tensor q = Tensor::empty({R, C}, qt), si = Tensor::empty(g, DType::f32),
                   am = Tensor::empty(g, DType::f32);
            Tensor rq = Tensor::empty({R, C}, qt), rsi = Tensor::empty(g, DType::f32),
                   ram = Tensor::empty(g, DType::f32);
            fp8_quantize(x, how, nullptr, q, si, am);
            ref::fp8_quantize(x, how, nullptr, rq, rsi, ram);
            const std::string what = std::string(portable ? "portable " : "avx512 ") +
                                     std::string(dtype_name(in)) + " order " + std::to_string(order) + " " +
                                     rc.name + " " + std::string(dtype_name(f)) + " q" + std::to_string(kind);
            ASSERT_EQ(0, std::memcmp(q.raw_data(), rq.raw_data(), q.nbytes())) << what << ": q";
            ASSERT_EQ(0, std::memcmp(si.raw_data(), rsi.raw_data(), si.nbytes())) << what << ": scale_inv";
            ASSERT_EQ(0, std::memcmp(am.raw_data(), ram.raw_data(), am.nbytes())) << what << ": amax";
          }
    }
  }
}

// Values worked out by hand.
TEST(Fp8Recipes, HandWorkedScales) {
  const auto one = [](std::vector<double> v, Fp8ScaleRule rule, DType f, bool deq = false) {
    Tensor x = Tensor::from_vector(v, {1, int64_t(v.size())}, DType::f32);
    Fp8Quant how;
    how.format = f;
    how.rule = rule;
    how.dequantize = deq;
    Tensor q = Tensor::empty({1, int64_t(v.size())}, DType::f32), si = Tensor::empty({1, 1}, DType::f32),
           am = Tensor::empty({1, 1}, DType::f32);
    fp8_quantize(x, how, nullptr, q, si, am);
    std::vector<double> out = q.to_doubles();
    out.push_back(si.to_doubles()[0]);
    return out;
  };
  // amax 448 in E4M3: scale 1, the values themselves; 1.5 * 2^-9 is the tie between the
  // subnormals 2^-9 (code 1) and 2^-8 (code 2): the even code.
  EXPECT_EQ(one({448, -1, 0.0029296875}, Fp8ScaleRule::fp32, DType::f8_e4m3),
            (std::vector<double>{448, -1, 0.00390625, 1}));
  // amax 2: scale 224, 0.1 * 224 = 22.4 -> 22 (E4M3 step 2 in [16, 32)), scale_inv 1/224.
  EXPECT_EQ(one({2, 0.1}, Fp8ScaleRule::fp32, DType::f8_e4m3),
            (std::vector<double>{448, 22, double(1.f / 224.f)}));
  // pow2: 448 / 2 = 224 -> 128; 2 * 128 = 256, 0.1 * 128 = 12.8 -> 13 (step 1 in [8, 16)).
  EXPECT_EQ(one({2, 0.1}, Fp8ScaleRule::pow2, DType::f8_e4m3), (std::vector<double>{256, 13, 1.0 / 128}));
  // e8m0, E4M3: amax 1.9 -> shared = 0 - 8, scale 256: 1.9 * 256 = 486.4 saturates to 448;
  // 0.5 * 256 = 128. Dequantized: 448 / 256 = 1.75, 0.5.
  EXPECT_EQ(one({1.9, 0.5}, Fp8ScaleRule::e8m0, DType::f8_e4m3), (std::vector<double>{448, 128, 1.0 / 256}));
  EXPECT_EQ(one({1.9, 0.5}, Fp8ScaleRule::e8m0, DType::f8_e4m3, true),
            (std::vector<double>{1.75, 0.5, 1.0 / 256}));
  // e8m0, E5M2: amax 3 -> shared = 1 - 15 = -14, scale 2^14: 3 * 16384 = 49152 (exact in E5M2).
  EXPECT_EQ(one({3}, Fp8ScaleRule::e8m0, DType::f8_e5m2), (std::vector<double>{49152, 1.0 / 16384}));
  // A zero block: scale 1 (fp32), 2^127 (e8m0); codes 0.
  EXPECT_EQ(one({0, 0}, Fp8ScaleRule::fp32, DType::f8_e4m3), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(one({0}, Fp8ScaleRule::e8m0, DType::f8_e4m3), (std::vector<double>{0, std::exp2(-127.0)}));
  // Not finite: NaN everywhere, amax +inf.
  const std::vector<double> bad = one({1, INFINITY}, Fp8ScaleRule::fp32, DType::f8_e4m3);
  for (double d : bad) EXPECT_TRUE(std::isnan(d));
}

TEST(Fp8Recipes, BadOperandsAreRefused) {
  const Tensor x = Tensor::zeros({4, 8}, DType::f32);
  Tensor q = Tensor::empty({4, 8}, DType::f8_e4m3), si = Tensor::empty({1, 1}, DType::f32),
         am = Tensor::empty({1, 1}, DType::f32);
  Fp8Quant how;
  EXPECT_NO_THROW(fp8_quantize(x, how, nullptr, q, si, am));
  Tensor q5 = Tensor::empty({4, 8}, DType::f8_e5m2);
  EXPECT_THROW(fp8_quantize(x, how, nullptr, q5, si, am), DTypeError);  // codes in the other format
  Tensor q16 = Tensor::empty({4, 8}, DType::f16);
  EXPECT_THROW(fp8_quantize(x, how, nullptr, q16, si, am), DTypeError);
  Tensor qs = Tensor::empty({4, 7}, DType::f8_e4m3);
  EXPECT_THROW(fp8_quantize(x, how, nullptr, qs, si, am), ShapeError);
  Fp8Quant rows = how;
  rows.block_rows = 1;
  EXPECT_THROW(fp8_quantize(x, rows, nullptr, q, si, am), ShapeError);  // grid must be (4, 1)
  Fp8Quant wrong = how;
  wrong.format = DType::bf16;
  EXPECT_THROW(fp8_quantize(x, wrong, nullptr, q, si, am), DTypeError);
  Fp8Quant neg = how;
  neg.block_cols = -1;
  EXPECT_THROW(fp8_quantize(x, neg, nullptr, q, si, am), ArgumentError);
  const Tensor s0 = Tensor::zeros({1, 1}, DType::f32);
  EXPECT_THROW(fp8_quantize(x, how, &s0, q, si, am), ArgumentError);  // a scale must be positive
  Fp8Quant p2 = how;
  p2.rule = Fp8ScaleRule::pow2;
  const Tensor s1 = Tensor::full({1, 1}, DType::f32, 1.0);
  EXPECT_THROW(fp8_quantize(x, p2, &s1, q, si, am), ArgumentError);  // given scales: fp32 rule only
  Fp8Quant deq = how;
  deq.dequantize = true;
  EXPECT_THROW(fp8_quantize(x, deq, nullptr, q, si, am), DTypeError);  // dequantized: bf16 or f32
}

}  // namespace
}  // namespace mixtrain::test
