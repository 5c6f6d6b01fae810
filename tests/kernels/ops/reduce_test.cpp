// Reductions (reduce, reduce_last, sum_to_row): fast CPU kernels vs the Kahan-summed references
// over odd, long and large shapes and f32/bf16/f16 storage; accuracy of 10^7-element sums; f64
// reference values; NaN propagation; thread-count determinism.
#include <cmath>
#include <cstring>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::sum_squares};
const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
    case ReduceOp::sum_squares:
      return "sum_squares";
  }
  return "?";
}
// Largest |term| of an input in [-2, 2] (squares: 4): the atol scale of a sum that may cancel.
double term_scale(ReduceOp op) { return op == ReduceOp::sum_squares ? 4.0 : 2.0; }

Shape shape_of(const OpConfig& cfg) { return Shape(cfg.sizes.begin(), cfg.sizes.end()); }

OpConfig make_cfg(const Shape& s, DType in, DType out, bool nc, int flags, uint64_t seed,
                  const std::string& what) {
  OpConfig c;
  c.sizes.assign(s.begin(), s.end());
  c.in = in;
  c.out = out;
  c.non_contiguous = nc;
  c.flags = flags;
  c.seed = seed;
  c.label = what + " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) + " " +
            s.to_string() + (nc ? " strided" : "");
  return c;
}

// reduce(x, op) over every element, returned as a (1) f64 tensor holding the fp32 result.
struct ReduceAllTest : OpTest {
  std::string name() const override { return "reduce"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    for (const Shape& s : {Shape{1}, Shape{3}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5},
                           Shape{256, 4099}, Shape{4096}, Shape{4097}, Shape{2000003}})
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (int op = 0; op < 4; ++op)
          c.push_back(make_cfg(s, t, DType::f32, false, op, seed++, op_name(kOps[op])));
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (int op = 0; op < 4; ++op)
        c.push_back(make_cfg(s, DType::bf16, DType::f32, true, op, seed++, op_name(kOps[op])));
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Tensor x = make_input(shape_of(cfg), cfg.in, cfg.seed, cfg.non_contiguous);
    const ReduceOp op = kOps[cfg.flags];
    const double v = reference ? ref::reduce(x, op) : mixtrain::reduce(x, op);
    return {Tensor::from_vector({v}, {1}, DType::f64)};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(DType::f32, shape_of(cfg).numel(), term_scale(kOps[cfg.flags]));
  }
};

struct ReduceLastTest : OpTest {
  std::string name() const override { return "reduce_last"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 100;
    for (const Shape& s : {Shape{1}, Shape{17}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5},
                           Shape{256, 4099}, Shape{3, 20000}, Shape{0, 5}})
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (DType o : {DType::f32, t})
          for (int op = 0; op < 4; ++op) {
            if (o == DType::f32 && t == DType::f32 && c.size() && c.back().in == t && c.back().out == o &&
                c.back().sizes == std::vector<int64_t>(s.begin(), s.end()) && c.back().flags == 3)
              break;  // (f32, f32) already done
            c.push_back(make_cfg(s, t, o, false, op, seed++, op_name(kOps[op])));
          }
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (int op = 0; op < 4; ++op)
        c.push_back(make_cfg(s, DType::f16, DType::f32, true, op, seed++, op_name(kOps[op])));
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const Tensor x = make_input(s, cfg.in, cfg.seed, cfg.non_contiguous);
    Tensor out = Tensor::empty(Shape(s.begin(), s.end() - 1), cfg.out);
    (reference ? ref::reduce_last : mixtrain::reduce_last)(x, kOps[cfg.flags], out);
    return {out};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, cfg.sizes.back(), term_scale(kOps[cfg.flags]));
  }
};

struct SumToRowTest : OpTest {
  std::string name() const override { return "sum_to_row"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 200;
    for (const Shape& s : {Shape{1}, Shape{17}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5},
                           Shape{256, 4099}, Shape{20000, 7}, Shape{9000, 130}, Shape{0, 5}})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        c.push_back(make_cfg(s, t, DType::f32, false, 0, seed++, "sum_to_row"));
        if (t != DType::f32) c.push_back(make_cfg(s, t, t, false, 0, seed++, "sum_to_row"));
      }
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (DType t : {DType::f32, DType::bf16}) c.push_back(make_cfg(s, t, t, true, 0, seed++, "sum_to_row"));
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const Tensor x = make_input(s, cfg.in, cfg.seed, cfg.non_contiguous);
    Tensor out = Tensor::empty({s.back()}, cfg.out);
    (reference ? ref::sum_to_row : mixtrain::sum_to_row)(x, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    const Shape s = shape_of(cfg);
    return default_tolerance(cfg.out, s.numel() / std::max<int64_t>(s.back(), 1), 2.0);
  }
};

// flags 1: NaNs planted in some rows (argmax is then the first NaN, as torch.argmax). 16-bit
// inputs tie often (few distinct values): the first index of the maximum must win in both.
struct ArgmaxLastTest : OpTest {
  std::string name() const override { return "argmax_last"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 300;
    for (const Shape& s :
         {Shape{1}, Shape{17}, Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}, Shape{3000, 257}, Shape{0, 5}})
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (int nan = 0; nan < 2; ++nan)
          c.push_back(make_cfg(s, t, DType::i32, false, nan, seed++, nan ? "NaN" : ""));
    for (const Shape& s : {Shape{7, 17}, Shape{33, 1003}, Shape{2, 3, 5}})
      for (DType t : {DType::f32, DType::bf16})
        c.push_back(make_cfg(s, t, DType::i32, true, 0, seed++, "argmax"));
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    Tensor x = make_input(s, cfg.in, cfg.seed, cfg.non_contiguous);
    if (cfg.flags == 1 && x.numel() > 0) {
      std::vector<float> v = x.to_floats();
      for (size_t i = 3; i < v.size(); i += 11) v[i] = NAN;
      x = Tensor::from_floats(v, s, cfg.in);
    }
    Tensor out = Tensor::empty(Shape(s.begin(), s.end() - 1), DType::i32);
    (reference ? ref::argmax_last : mixtrain::argmax_last)(x, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return {}; }  // indices: exact
};

TEST(ReduceOps, ArgmaxLastIsTorchsArgmax) {
  const Tensor x =
      Tensor::from_floats({1, 3, 3, 2, /**/ -1, NAN, 5, NAN, /**/ 0, 0, 0, 0}, {3, 4}, DType::f32);
  Tensor out = Tensor::empty({3}, DType::i32);
  argmax_last(x, out);
  EXPECT_EQ(out.to_ints(), (std::vector<int32_t>{1, 1, 0}));  // first of ties; first NaN; all equal
  Tensor bad = Tensor::empty({3}, DType::f32);
  EXPECT_THROW(argmax_last(x, bad), DTypeError);
  Tensor wrong = Tensor::empty({4}, DType::i32);
  EXPECT_THROW(argmax_last(x, wrong), ShapeError);
}

// Bit-identical with 1 and 2 threads: the blocks and chunks are fixed, threads only pick them up.
bool split_across_threads(const OpConfig& cfg) { return shape_of(cfg).numel() >= 100000; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(ArgmaxLastTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(ReduceAllTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(ReduceLastTest, split_across_threads);
MIXTRAIN_REGISTER_OP_TEST_THREADS(SumToRowTest, split_across_threads);

// A plain running fp32 sum of 10^7 copies of 0.1f is off by ~9%; the blocked sums must stay
// within a few fp32 ulps of the exact value.
TEST(ReduceOps, LongSumsStayAccurate) {
  const int64_t n = 10'000'000;
  const double exact = static_cast<double>(n) * static_cast<double>(0.1f);
  for (DType t : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::full({n}, t, 0.1);
    const double per = t == DType::f32 ? static_cast<double>(0.1f) : x.at({0});
    const double want = static_cast<double>(n) * per;
    SCOPED_TRACE(std::string(dtype_name(t)));
    EXPECT_NEAR(reduce(x, ReduceOp::sum), want, want * 1e-6);
    EXPECT_NEAR(reduce(x, ReduceOp::mean), per, per * 1e-6);
    EXPECT_NEAR(reduce(x, ReduceOp::sum_squares), n * per * per, n * per * per * 1e-6);
    Tensor row = Tensor::empty({}, DType::f32);
    reduce_last(x, ReduceOp::sum, row);
    EXPECT_NEAR(row.item(), want, want * 1e-6);
  }
  EXPECT_NEAR(ref::reduce(Tensor::full({n}, DType::f32, 0.1), ReduceOp::sum), exact, exact * 1e-6);
  // Bias gradient shape: many rows, few columns.
  const Tensor ones = Tensor::full({1'000'000, 3}, DType::f32, 0.1);
  Tensor col = Tensor::empty({3}, DType::f32);
  sum_to_row(ones, col);
  for (double v : col.to_doubles()) EXPECT_NEAR(v, 1e6 * static_cast<double>(0.1f), 1e5 * 1e-6);
}

TEST(ReduceOps, MaxPropagatesNaNAndInf) {
  std::vector<double> v(5000, 1.0);
  v[4321] = INFINITY;
  EXPECT_EQ(reduce(Tensor::from_vector(v, {5000}, DType::f32), ReduceOp::max), INFINITY);
  v[17] = NAN;
  for (DType t : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::from_vector(v, {5000}, t);
    EXPECT_TRUE(std::isnan(reduce(x, ReduceOp::max)));
    EXPECT_TRUE(std::isnan(ref::reduce(x, ReduceOp::max)));
    Tensor r = Tensor::empty({2}, DType::f32);
    reduce_last(x.reshape({2, 2500}), ReduceOp::max, r);
    EXPECT_TRUE(std::isnan(r.at({0})));
    EXPECT_EQ(r.at({1}), INFINITY);
  }
  const Tensor neg = Tensor::full({7}, DType::f32, -3.0);
  EXPECT_EQ(reduce(neg, ReduceOp::max), -3.0);
}

TEST(ReduceRef, KnownValuesF64) {
  const Tensor x = Tensor::from_vector({1, 2, 3, -4, 0.5, 6}, {2, 3}, DType::f64);
  EXPECT_EQ(reduce(x, ReduceOp::sum), 8.5);
  EXPECT_EQ(reduce(x, ReduceOp::mean), 8.5 / 6);
  EXPECT_EQ(reduce(x, ReduceOp::max), 6.0);
  EXPECT_EQ(reduce(x, ReduceOp::sum_squares), 66.25);
  Tensor r = Tensor::empty({2}, DType::f64);
  reduce_last(x, ReduceOp::sum, r);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{6.0, 2.5}));
  reduce_last(x, ReduceOp::max, r);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{3.0, 6.0}));
  Tensor c = Tensor::empty({3}, DType::f64);
  sum_to_row(x, c);
  EXPECT_EQ(c.to_doubles(), (std::vector<double>{-3.0, 2.5, 9.0}));
  // f64 keeps double precision (an fp32 sum would lose the 1e-10).
  const Tensor y = Tensor::from_vector({1e-10, 1.0, -1.0}, {3}, DType::f64);
  EXPECT_NEAR(reduce(y, ReduceOp::sum), 1e-10, 1e-15);
  // Empty: sums are 0, the mean is NaN (0/0).
  const Tensor e = Tensor::empty({0}, DType::f32);
  EXPECT_EQ(reduce(e, ReduceOp::sum), 0.0);
  EXPECT_TRUE(std::isnan(reduce(e, ReduceOp::mean)));
}

}  // namespace
}  // namespace mixtrain::test
