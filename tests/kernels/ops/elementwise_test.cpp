// Elementwise ops (add, mul, scale, gelu): fast CPU kernels vs the scalar references over odd and
// large shapes, every 16-bit/f32 storage combination, row broadcasting, strided inputs and
// outputs, in-place use; f64 reference values; thread-count determinism.
#include <cmath>
#include <cstring>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

// (in, out) storage pairs: same format, and mixed with f32 both ways.
const std::vector<std::pair<DType, DType>> kDtypePairs = {
    {DType::f32, DType::f32},  {DType::bf16, DType::bf16}, {DType::f16, DType::f16},
    {DType::bf16, DType::f32}, {DType::f32, DType::bf16},  {DType::f16, DType::f32},
    {DType::f32, DType::f16},  {DType::bf16, DType::f16}};

std::string dims_label(const Shape& s) { return s.to_string(); }

enum Flags { kBroadcast = 1, kInPlace = 2, kStridedOut = 4, kPortable = 1 << 9 };

// Shapes x dtype pairs x layouts; the large shape (threaded) only with a few dtype pairs.
std::vector<OpConfig> elementwise_configs(bool binary) {
  const std::vector<Shape> shapes = {{1}, {3}, {7, 17}, {33, 1003}, {2, 3, 5}, {1, 1, 4099}, {0, 5}};
  std::vector<OpConfig> out;
  uint64_t seed = 1;
  auto push = [&](const Shape& s, DType in, DType o, bool nc, int flags) {
    OpConfig c;
    c.sizes.assign(s.begin(), s.end());
    c.in = in;
    c.out = o;
    c.non_contiguous = nc;
    c.flags = flags;
    c.seed = seed++;
    c.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(o)) + " " + dims_label(s) +
              (nc ? " strided" : "") + (flags & kBroadcast ? " row-broadcast" : "") +
              (flags & kInPlace ? " in-place" : "") + (flags & kStridedOut ? " strided-out" : "");
    out.push_back(c);
  };
  for (const Shape& s : shapes)
    for (auto [in, o] : kDtypePairs) {
      push(s, in, o, false, 0);
      if (binary) push(s, in, o, false, kBroadcast);
    }
  for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
    for (DType t : {DType::f32, DType::bf16}) {
      push(s, t, t, true, 0);
      push(s, t, t, false, kInPlace);
      push(s, t, DType::f32, true, kStridedOut);
      if (binary) push(s, t, t, true, kBroadcast | kStridedOut);
    }
  for (auto [in, o] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::bf16},
                       std::pair{DType::f16, DType::f32}}) {
    push({256, 4099}, in, o, false, 0);
    if (binary) push({256, 4099}, in, o, false, kBroadcast);
  }
  push({256, 4099}, DType::bf16, DType::bf16, true, kStridedOut);
  return out;
}

// Output of cfg's shape: a fresh tensor, or a strided view (a slice of a wider tensor).
Tensor make_output(const Shape& s, DType t, bool strided) {
  if (!strided || s.size() == 0) return Tensor::empty(s, t);
  Shape wide = s;
  wide[wide.size() - 1] += 5;
  return Tensor::full(wide, t, 7.0).slice(s.size() - 1, 2, 2 + s.back());
}

struct ElementwiseInputs {
  Tensor a, b, out;
};
ElementwiseInputs make_inputs(const OpConfig& cfg, bool binary) {
  const Shape s(cfg.sizes.begin(), cfg.sizes.end());
  ElementwiseInputs in;
  in.a = make_input(s, cfg.in, cfg.seed, cfg.non_contiguous);
  if (binary) {
    const Shape bs = (cfg.flags & kBroadcast) ? Shape{s.back()} : s;
    in.b = make_input(bs, cfg.in, cfg.seed + 1000, cfg.non_contiguous);
  }
  in.out = (cfg.flags & kInPlace) ? in.a : make_output(s, cfg.out, cfg.flags & kStridedOut);
  return in;
}

template <void (*Fast)(const Tensor&, const Tensor&, Tensor&),
          void (*Ref)(const Tensor&, const Tensor&, Tensor&)>
struct BinaryTest : OpTest {
  std::string op;
  explicit BinaryTest(std::string name) : op(std::move(name)) {}
  std::string name() const override { return op; }
  std::vector<OpConfig> configs() const override { return elementwise_configs(true); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    ElementwiseInputs in = make_inputs(cfg, true);
    (reference ? Ref : Fast)(in.a, in.b, in.out);
    return {in.out};
  }
};
struct AddTest : BinaryTest<mixtrain::add, ref::add> {
  AddTest() : BinaryTest("add") {}
};
struct MulTest : BinaryTest<mixtrain::mul, ref::mul> {
  MulTest() : BinaryTest("mul") {}
};

struct ScaleTest : OpTest {
  std::string name() const override { return "scale"; }
  std::vector<OpConfig> configs() const override { return elementwise_configs(false); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    ElementwiseInputs in = make_inputs(cfg, false);
    (reference ? ref::scale : mixtrain::scale)(in.a, -0.37f, in.out);
    return {in.out};
  }
};

struct GeluTest : OpTest {
  std::string name() const override { return "gelu"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c = elementwise_configs(false);
    // Wide range: the exp saturates (|x| ~ 10..60) and x ~ 0 (GELU ~ x/2).
    for (DType t : {DType::f32, DType::bf16}) {
      OpConfig w;
      w.label = std::string(dtype_name(t)) + " wide range";
      w.sizes = {4099};
      w.in = w.out = t;
      w.flags = 1 << 8;
      w.seed = 99;
      c.push_back(w);
    }
    // Each again through the portable loops (simd_forms.h), which a CPU without AVX-512 runs.
    return with_portable_twins(c, kPortable);
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    ElementwiseInputs in = make_inputs(cfg, false);
    if (cfg.flags & (1 << 8)) in.a = Tensor::rand_uniform({cfg.sizes[0]}, cfg.in, cfg.seed, -60.f, 60.f);
    const PortableForms form(!reference && (cfg.flags & kPortable));
    (reference ? ref::gelu : mixtrain::gelu)(in.a, in.out);
    return {in.out};
  }
};

// Bit-identical outputs with 1 and 2 threads (elementwise results depend only on each element).
bool split_across_threads(const OpConfig& cfg) { return cfg.sizes.size() >= 2 && cfg.sizes[0] >= 256; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(AddTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(MulTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(ScaleTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(GeluTest, split_across_threads);

// f64 references against values computed by hand / with mpmath.
TEST(ElementwiseRef, KnownValuesF64) {
  const Tensor x = Tensor::from_vector({1.0, 0.0, -1.0, 3.0, -10.0}, {5}, DType::f64);
  Tensor out = Tensor::empty({5}, DType::f64);
  ref::gelu(x, out);
  const std::vector<double> g = out.to_doubles();
  EXPECT_NEAR(g[0], 0.8411919906082768, 1e-15);
  EXPECT_EQ(g[1], 0.0);
  EXPECT_NEAR(g[2], -0.15880800939172324, 1e-15);
  EXPECT_NEAR(g[3], 2.996362607918227, 1e-14);
  EXPECT_NEAR(g[4], 0.0, 1e-30);
  // The public op on f64 runs the reference (f64 has no fast path) and gives the same bits.
  Tensor out2 = Tensor::empty({5}, DType::f64);
  gelu(x, out2);
  EXPECT_EQ(out2.to_doubles(), g);

  const Tensor a = Tensor::from_vector({1.5, -2.0, 0.25, 4.0, 1e-3, 7.0}, {2, 3}, DType::f64);
  const Tensor row = Tensor::from_vector({10.0, 20.0, -0.5}, {3}, DType::f64);
  Tensor s = Tensor::empty({2, 3}, DType::f64);
  add(a, row, s);
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{11.5, 18.0, -0.25, 14.0, 20.001, 6.5}));
  mul(a, row, s);
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{15.0, -40.0, -0.125, 40.0, 0.02, -3.5}));
  scale(a, 0.5f, s);
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{0.75, -1.0, 0.125, 2.0, 5e-4, 3.5}));
}

// GELU (tanh and erf forms) and its gradient on every bf16 value (NaNs, infinities, subnormals, the far
// tails), in both forms (portable loops and AVX-512 rows), bf16 -> bf16 and bf16 -> f32, against the scalar
// reference: NaN exactly where it is, infinities equal, the rest within the output's budget.
TEST(GeluForms, EveryBf16ValueInBothForms) {
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  Tensor x = Tensor::empty({65536}, DType::bf16);
  std::memcpy(x.raw_data(), bits.data(), bits.size() * 2);
  const Tensor g = Tensor::rand_uniform({65536}, DType::bf16, 5, -2.f, 2.f);
  for (const bool portable : {false, true})
    for (const DType out : {DType::bf16, DType::f32}) {
      const std::string what =
          std::string(portable ? "portable" : "fast") + " bf16->" + std::string(dtype_name(out));
      Tensor r = Tensor::empty({65536}, out), f = Tensor::empty({65536}, out);
      ref::gelu(x, r);
      {
        const PortableForms form(portable);
        gelu(x, f);
      }
      EXPECT_TRUE(all_close(r, f, default_tolerance(out), "gelu " + what));
      ref::gelu_backward(x, g, r);
      {
        const PortableForms form(portable);
        gelu_backward(x, g, f);
      }
      // gelu' crosses 0 near x = -0.75 (see backward_test): atol scaled by the terms' size.
      EXPECT_TRUE(all_close(r, f, default_tolerance(out, 1, 2.0), "gelu_backward " + what));
      // The erf form (the encoders' activation).
      ref::activation(Activation::gelu_erf, x, r);
      {
        const PortableForms form(portable);
        activation(Activation::gelu_erf, x, f);
      }
      EXPECT_TRUE(all_close(r, f, default_tolerance(out), "gelu_erf " + what));
      ref::activation_backward(Activation::gelu_erf, x, g, r);
      {
        const PortableForms form(portable);
        activation_backward(Activation::gelu_erf, x, g, f);
      }
      EXPECT_TRUE(all_close(r, f, default_tolerance(out, 1, 2.0), "gelu_erf backward " + what));
    }
}

// Non-finite inputs pass through the fast path as IEEE arithmetic says.
TEST(ElementwiseOps, NonFiniteValues) {
  const Tensor x = Tensor::from_vector({INFINITY, NAN, 100.0, -100.0}, {4}, DType::f32);
  Tensor out = Tensor::empty({4}, DType::f32);
  gelu(x, out);
  const std::vector<double> g = out.to_doubles();
  EXPECT_EQ(g[0], INFINITY);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_EQ(g[2], 100.0);
  EXPECT_EQ(g[3], 0.0);
}

}  // namespace
}  // namespace mixtrain::test
