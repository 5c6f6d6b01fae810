// Backward ops and the causal softmax (kernels/ops_backward.h): fast CPU kernels vs the scalar
// references over odd shapes (1, 3, 17, 33, 130) and a large threaded one, f32/bf16/f16 storage,
// strided and transposed layouts, causal with Tq == Tk and Tq < Tk; accumulating outputs start from
// the same nonzero values in both runs. Also: masked entries exactly 0, in-place use, and
// bit-identical results for 1 and 2 threads.
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

enum Flags {
  kTransposed = 1,
  kStridedOut = 2,
  kIdsShaped = 4,
  kNegScale = 8,
  kAllIgnored = 16,
  kBf16Grads = 32,
  kPortable = 1 << 9  // the fast op's portable loops (simd_forms.h)
};

Shape shape_of(const OpConfig& cfg) { return Shape(cfg.sizes.begin(), cfg.sizes.end()); }

// An overwritten output: pre-filled with NaN (an element the kernel forgets shows up), contiguous
// or a slice of a wider tensor.
Tensor make_output(const Shape& s, DType t, bool strided) {
  if (!strided || s.size() == 0) return Tensor::full(s, t, NAN);
  Shape wide = s;
  wide[wide.size() - 1] += 5;
  return Tensor::full(wide, t, NAN).slice(s.size() - 1, 2, 2 + s.back());
}

// An input of shape s laid out transposed (last two dims swapped in memory): no row view, so the
// fast kernels must take their copy / fallback path.
Tensor make_transposed(const Shape& s, DType t, uint64_t seed) {
  Shape sw = s;
  std::swap(sw[sw.size() - 1], sw[sw.size() - 2]);
  return Tensor::rand_uniform(sw, t, seed, -2.f, 2.f).transpose(s.size() - 2, s.size() - 1);
}

Tensor input(const OpConfig& cfg, const Shape& s, DType t, uint64_t seed, float lo = -2.f, float hi = 2.f) {
  if ((cfg.flags & kTransposed) && s.size() >= 2) return make_transposed(s, t, seed);
  return make_input(s, t, seed, cfg.non_contiguous, lo, hi);
}

// Deterministic ids in [0, V) (with repeats) or targets with every 5th row ignored (-1).
std::vector<int32_t> make_indices(int64_t n, int64_t V, uint64_t seed, bool ignore_some) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v[static_cast<size_t>(i)] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(V));
    if (ignore_some && i % 5 == 2) v[static_cast<size_t>(i)] = -1;
  }
  return v;
}

std::string label(const char* dims, const OpConfig& c) {
  // Built with an ostringstream: GCC 12 gives a false -Wrestrict on chained std::string '+' here.
  std::ostringstream os;
  os << dtype_name(c.in) << "->" << dtype_name(c.out) << " " << dims;
  for (int64_t v : c.sizes) os << " " << v;
  std::string s = os.str();
  if (c.non_contiguous) s += " strided";
  if (c.flags & kTransposed) s += " transposed";
  if (c.flags & kStridedOut) s += " strided-out";
  if (c.flags & kIdsShaped) s += " ids-shaped";
  if (c.flags & kNegScale) s += " negative-scale";
  if (c.flags & kAllIgnored) s += " all-ignored";
  if (c.flags & kBf16Grads) s += " bf16-param-grads";
  return s;
}

// The same storage pairs for every op: each 16-bit format alone and mixed with f32.
const std::vector<std::pair<DType, DType>> kDtypePairs = {
    {DType::f32, DType::f32},  {DType::bf16, DType::bf16}, {DType::f16, DType::f16},
    {DType::bf16, DType::f32}, {DType::f32, DType::bf16},  {DType::f16, DType::f32}};

// shapes x dtype pairs, plus strided/transposed variants (f32, bf16) and the large shape.
std::vector<OpConfig> make_configs(const char* dims, const std::vector<std::vector<int64_t>>& shapes,
                                   const std::vector<std::vector<int64_t>>& layout_shapes,
                                   const std::vector<int64_t>& large, int layout_flags) {
  std::vector<OpConfig> out;
  uint64_t seed = 11;
  auto push = [&](const std::vector<int64_t>& s, DType in, DType o, bool nc, int flags) {
    OpConfig c;
    c.sizes = s;
    c.in = in;
    c.out = o;
    c.non_contiguous = nc;
    c.flags = flags;
    c.seed = seed++;
    c.label = label(dims, c);
    out.push_back(c);
  };
  for (const auto& s : shapes)
    for (auto [in, o] : kDtypePairs) push(s, in, o, false, 0);
  for (const auto& s : layout_shapes)
    for (DType t : {DType::f32, DType::bf16}) {
      push(s, t, t, true, layout_flags & kStridedOut);
      if (layout_flags & kTransposed) push(s, t, t, false, kTransposed);
    }
  for (auto [in, o] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::bf16},
                       std::pair{DType::f16, DType::f32}})
    push(large, in, o, false, 0);
  return out;
}

// ---- gelu_backward ----------------------------------------------------------------------------------
struct GeluBackwardTest : OpTest {
  std::string name() const override { return "gelu_backward"; }
  std::vector<OpConfig> configs() const override {
    // Each again through the portable loops (simd_forms.h), which a CPU without AVX-512 runs.
    return with_portable_twins(make_configs("shape", {{1}, {3}, {17, 33}, {33, 130}, {2, 3, 17}, {0, 5}},
                                            {{17, 33}, {3, 33, 130}}, {300, 257}, kTransposed | kStridedOut),
                               kPortable);
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    // A wider x range than the default, so the tails of gelu' (s -> 0 and s -> 1) are exercised.
    const Tensor x = input(cfg, s, cfg.in, cfg.seed, -6.f, 6.f);
    const Tensor dout = input(cfg, s, cfg.in, cfg.seed + 1);
    Tensor dx = make_output(s, cfg.out, cfg.flags & kStridedOut);
    const PortableForms form(!reference && (cfg.flags & kPortable));
    reference ? ref::gelu_backward(x, dout, dx) : gelu_backward(x, dout, dx);
    return {dx};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    // gelu' crosses 0 near x = -0.75 (s and the second term cancel): atol scaled by the terms' size (~2).
    return default_tolerance(cfg.out, 1, 2.0);
  }
};
// Every op, every configuration: the fast path gives the same bits with 1 and with 2 threads.
bool split_across_threads(const OpConfig&) { return true; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(GeluBackwardTest, split_across_threads);

// ---- causal_softmax ---------------------------------------------------------------------------------
float scale_of(const OpConfig& cfg) { return (cfg.flags & kNegScale) ? -0.7f : 0.35f; }

std::vector<OpConfig> causal_configs() {
  // (B, Tq, Tk): Tq == Tk (training) and Tq < Tk (queries are the last Tq of Tk keys).
  auto c =
      make_configs("B,Tq,Tk", {{1, 1, 1}, {2, 3, 3}, {1, 17, 17}, {2, 17, 33}, {3, 33, 130}, {1, 1, 130}},
                   {{2, 17, 33}, {1, 33, 33}}, {2, 130, 300}, kStridedOut);
  OpConfig neg = c[6];  // (2, 3, 3) f32 with a negative scale
  neg.flags |= kNegScale;
  neg.label = label("B,Tq,Tk", neg);
  c.push_back(neg);
  OpConfig two_d = c[0];  // a plain (Tq, Tk) matrix
  two_d.sizes = {5, 7};
  two_d.label = label("Tq,Tk", two_d);
  c.push_back(two_d);
  return c;
}

struct CausalSoftmaxTest : OpTest {
  std::string name() const override { return "causal_softmax"; }
  std::vector<OpConfig> configs() const override { return causal_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const Tensor x = input(cfg, s, cfg.in, cfg.seed, -4.f, 4.f);
    Tensor y = make_output(s, cfg.out, cfg.flags & kStridedOut);
    reference ? ref::causal_softmax(x, scale_of(cfg), y) : causal_softmax(x, scale_of(cfg), y);
    return {y};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, cfg.sizes.back());
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(CausalSoftmaxTest, split_across_threads);

struct CausalSoftmaxBackwardTest : OpTest {
  std::string name() const override { return "causal_softmax_backward"; }
  std::vector<OpConfig> configs() const override { return causal_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    // y: a real causal softmax (same values in both runs), stored in the input dtype.
    const Tensor x = input(cfg, s, DType::f32, cfg.seed, -4.f, 4.f);
    Tensor y = make_output(s, cfg.in, cfg.non_contiguous);
    ref::causal_softmax(x, scale_of(cfg), y);
    const Tensor dy = input(cfg, s, cfg.in, cfg.seed + 1);
    Tensor dx = make_output(s, cfg.out, cfg.flags & kStridedOut);
    reference ? ref::causal_softmax_backward(y, dy, scale_of(cfg), dx)
              : causal_softmax_backward(y, dy, scale_of(cfg), dx);
    return {dx};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, cfg.sizes.back());
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(CausalSoftmaxBackwardTest, split_across_threads);

// ---- softmax_last_backward --------------------------------------------------------------------------
struct SoftmaxLastBackwardTest : OpTest {
  std::string name() const override { return "softmax_last_backward"; }
  std::vector<OpConfig> configs() const override {
    return make_configs("R,C", {{1, 1}, {3, 17}, {33, 130}, {130, 33}, {2, 3, 17}, {17}},
                        {{17, 33}, {2, 33, 130}}, {300, 257}, kTransposed | kStridedOut);
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const Tensor x = input(cfg, s, DType::f32, cfg.seed, -4.f, 4.f);
    Tensor y = (cfg.flags & kTransposed) ? make_transposed(s, cfg.in, cfg.seed + 7)
                                         : make_output(s, cfg.in, cfg.non_contiguous);
    ref::softmax_last(x, y);
    const Tensor dy = input(cfg, s, cfg.in, cfg.seed + 1);
    Tensor dx = make_output(s, cfg.out, cfg.flags & kStridedOut);
    reference ? ref::softmax_last_backward(y, dy, dx) : softmax_last_backward(y, dy, dx);
    return {dx};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, cfg.sizes.back());
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(SoftmaxLastBackwardTest, split_across_threads);

// ---- layer_norm_backward ----------------------------------------------------------------------------
struct LayerNormBackwardTest : OpTest {
  std::string name() const override { return "layer_norm_backward"; }
  std::vector<OpConfig> configs() const override {
    auto c = make_configs("R,C", {{1, 1}, {3, 17}, {33, 130}, {130, 33}, {2, 17, 33}, {70, 3}},
                          {{17, 33}, {2, 33, 130}}, {300, 257}, kTransposed | kStridedOut);
    for (size_t i : {2 * kDtypePairs.size(), c.size() - 2}) {  // (33, 130) f32 and the large bf16
      OpConfig b = c[i];
      b.flags |= kBf16Grads;
      b.label = label("R,C", b);
      c.push_back(b);
    }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const int64_t C = s.back();
    const Tensor x = input(cfg, s, cfg.in, cfg.seed);
    const Tensor weight = Tensor::rand_uniform({C}, cfg.in, cfg.seed + 2, 0.5f, 1.5f);
    const Tensor bias = Tensor::rand_uniform({C}, cfg.in, cfg.seed + 3, -0.5f, 0.5f);
    const Shape lead(s.begin(), s.end() - 1);
    Tensor y = Tensor::empty(s, DType::f32), mean = Tensor::empty(lead, DType::f32),
           rstd = Tensor::empty(lead, DType::f32);
    ref::layer_norm(x, weight, bias, 1e-5f, y, &mean, &rstd);
    const Tensor dout = input(cfg, s, cfg.in, cfg.seed + 1);
    Tensor dx = make_output(s, cfg.out, cfg.flags & kStridedOut);
    const DType gt = (cfg.flags & kBf16Grads) ? DType::bf16 : DType::f32;
    Tensor dw = Tensor::rand_uniform({C}, gt, cfg.seed + 4, -1.f, 1.f);
    Tensor db = Tensor::rand_uniform({C}, gt, cfg.seed + 5, -1.f, 1.f);
    reference ? ref::layer_norm_backward(x, weight, mean, rstd, dout, dx, dw, db)
              : layer_norm_backward(x, weight, mean, rstd, dout, dx, dw, db);
    return {dx, dw, db};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t index) const override {
    // dx: sums over C of terms up to ~4 (|dout| * |w| * rstd); dweight/dbias: sums over R rows.
    const int64_t C = cfg.sizes.back();
    const int64_t R = shape_of(cfg).numel() / std::max<int64_t>(C, 1);
    if (index == 0) return default_tolerance(cfg.out, C, 4.0);
    return default_tolerance((cfg.flags & kBf16Grads) ? DType::bf16 : DType::f32, R, 4.0);
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(LayerNormBackwardTest, split_across_threads);

// ---- embedding_backward -----------------------------------------------------------------------------
struct EmbeddingBackwardTest : OpTest {
  std::string name() const override { return "embedding_backward"; }
  // sizes: V, C, R (ids are (R), or (2, R/2) with dout (2, R/2, C) when kIdsShaped).
  std::vector<OpConfig> configs() const override {
    auto c = make_configs("V,C,R", {{1, 17, 3}, {5, 3, 17}, {17, 33, 130}, {130, 1, 33}, {33, 130, 17}},
                          {{17, 33, 130}}, {50, 257, 300}, 0);
    OpConfig shaped = c[2 * kDtypePairs.size()];
    shaped.flags |= kIdsShaped;
    shaped.label = label("V,C,R", shaped);
    c.push_back(shaped);
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t V = cfg.sizes[0], C = cfg.sizes[1], R = cfg.sizes[2];
    const bool shaped = (cfg.flags & kIdsShaped) && R % 2 == 0;
    const Shape ids_shape = shaped ? Shape{2, R / 2} : Shape{R};
    const Tensor ids = Tensor::from_ints(make_indices(R, V, cfg.seed, false), ids_shape);
    const Tensor dout =
        make_input(shaped ? Shape{2, R / 2, C} : Shape{R, C}, cfg.in, cfg.seed + 1, cfg.non_contiguous);
    Tensor dw = Tensor::rand_uniform({V, C}, cfg.out, cfg.seed + 2, -1.f, 1.f);
    reference ? ref::embedding_backward(ids, dout, dw) : embedding_backward(ids, dout, dw);
    return {dw};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, cfg.sizes[2], 2.0);  // up to R rows summed per id
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(EmbeddingBackwardTest, split_across_threads);

// ---- cross_entropy_backward -------------------------------------------------------------------------
constexpr float kDloss = 1.7f;

struct CrossEntropyBackwardTest : OpTest {
  std::string name() const override { return "cross_entropy_backward"; }
  std::vector<OpConfig> configs() const override {
    auto c = make_configs("R,V", {{1, 1}, {3, 17}, {33, 130}, {130, 33}, {17, 1}}, {{17, 33}, {33, 130}},
                          {64, 1500}, kTransposed | kStridedOut);
    OpConfig none = c[2 * kDtypePairs.size()];  // (33, 130) f32
    none.flags |= kAllIgnored;
    none.label = label("R,V", none);
    c.push_back(none);
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const int64_t R = s[0], V = s[1];
    const Tensor logits = input(cfg, s, cfg.in, cfg.seed, -4.f, 4.f);
    std::vector<int32_t> t = make_indices(R, V, cfg.seed + 1, true);
    if (cfg.flags & kAllIgnored) std::fill(t.begin(), t.end(), -1);
    const Tensor targets = Tensor::from_ints(t, {R});
    Tensor dl = make_output(s, cfg.out, cfg.flags & kStridedOut);
    reference ? ref::cross_entropy_backward(logits, targets, kDloss, dl)
              : cross_entropy_backward(logits, targets, kDloss, dl);
    return {dl};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    // Every element is at most dloss / n_valid in size: that is the scale of atol.
    return default_tolerance(cfg.out, cfg.sizes[1], kDloss / static_cast<double>(cfg.sizes[0]));
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(CrossEntropyBackwardTest, split_across_threads);

// ---- sum_to_row_accumulate --------------------------------------------------------------------------
struct SumToRowAccumulateTest : OpTest {
  std::string name() const override { return "sum_to_row_accumulate"; }
  std::vector<OpConfig> configs() const override {
    return make_configs("shape", {{1, 1}, {3, 17}, {33, 130}, {130, 33}, {2, 17, 33}, {17}},
                        {{17, 33}, {2, 33, 130}}, {300, 257}, kTransposed);
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const Tensor x = input(cfg, s, cfg.in, cfg.seed);
    Tensor out = Tensor::rand_uniform({s.back()}, cfg.out, cfg.seed + 1, -1.f, 1.f);
    reference ? ref::sum_to_row_accumulate(x, out) : sum_to_row_accumulate(x, out);
    return {out};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, shape_of(cfg).numel() / cfg.sizes.back(), 2.0);
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(SumToRowAccumulateTest, split_across_threads);

// ---- add_inplace ------------------------------------------------------------------------------------
struct AddInplaceTest : OpTest {
  std::string name() const override { return "add_inplace"; }
  std::vector<OpConfig> configs() const override {
    return make_configs("shape", {{1}, {3}, {17, 33}, {33, 130}, {2, 3, 17}}, {{17, 33}, {3, 33, 130}},
                        {300, 257}, kTransposed | kStridedOut);
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Shape s = shape_of(cfg);
    const Tensor x = input(cfg, s, cfg.in, cfg.seed);
    Tensor acc = make_output(s, cfg.out, cfg.flags & kStridedOut);
    acc.copy_from(Tensor::rand_uniform(s, cfg.out, cfg.seed + 1, -2.f, 2.f));
    reference ? ref::add_inplace(acc, x) : add_inplace(acc, x);
    return {acc};
  }
  Tolerance tolerance(const OpConfig& cfg, size_t) const override {
    return default_tolerance(cfg.out, 1, 2.0);
  }
};
MIXTRAIN_REGISTER_OP_TEST_THREADS(AddInplaceTest, split_across_threads);

// Masked entries are exactly 0 (forward and backward), unmasked rows sum to 1.
TEST(BackwardOps, CausalMaskIsExact) {
  for (bool reference : {false, true})
    for (auto [Tq, Tk] : {std::pair<int64_t, int64_t>{17, 17}, {5, 33}}) {
      const Tensor x = Tensor::rand_uniform({2, Tq, Tk}, DType::f32, 3, -3.f, 3.f);
      const Tensor dy = Tensor::rand_uniform({2, Tq, Tk}, DType::f32, 4, -3.f, 3.f);
      Tensor y = Tensor::full({2, Tq, Tk}, DType::f32, NAN), dx = Tensor::full({2, Tq, Tk}, DType::f32, NAN);
      reference ? ref::causal_softmax(x, 0.5f, y) : causal_softmax(x, 0.5f, y);
      reference ? ref::causal_softmax_backward(y, dy, 0.5f, dx) : causal_softmax_backward(y, dy, 0.5f, dx);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < Tq; ++i) {
          double row = 0;
          for (int64_t j = 0; j < Tk; ++j) {
            const bool masked = j > i + (Tk - Tq);
            if (masked) {
              EXPECT_EQ(y.at({b, i, j}), 0.0) << b << " " << i << " " << j;
              EXPECT_EQ(dx.at({b, i, j}), 0.0) << b << " " << i << " " << j;
            } else {
              EXPECT_GT(y.at({b, i, j}), 0.0);
            }
            row += y.at({b, i, j});
          }
          EXPECT_NEAR(row, 1.0, 1e-6);
        }
    }
}

// Overwritten outputs may be an input itself: in place gives the out-of-place values.
TEST(BackwardOps, InPlaceMatchesOutOfPlace) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::rand_uniform({33, 130}, t, 5, -4.f, 4.f);
    const Tensor dout = Tensor::rand_uniform({33, 130}, t, 6, -2.f, 2.f);
    // gelu_backward into dout
    Tensor dx = Tensor::empty({33, 130}, t), g = dout.clone();
    gelu_backward(x, dout, dx);
    gelu_backward(x, g, g);
    EXPECT_TRUE(all_close(dx, g, Tolerance{}, "gelu_backward in place"));
    // cross_entropy_backward into logits
    const Tensor targets = Tensor::from_ints(make_indices(33, 130, 9, true), {33});
    Tensor dl = Tensor::empty({33, 130}, t), lg = x.clone();
    cross_entropy_backward(x, targets, 2.f, dl);
    cross_entropy_backward(lg, targets, 2.f, lg);
    EXPECT_TRUE(all_close(dl, lg, Tolerance{}, "cross_entropy_backward in place"));
    // causal softmax and its backward in place
    const Tensor s = x.reshape({3, 11, 130});
    Tensor y = Tensor::empty(s.shape(), t), yi = s.clone();
    causal_softmax(s, 0.3f, y);
    causal_softmax(yi, 0.3f, yi);
    EXPECT_TRUE(all_close(y, yi, Tolerance{}, "causal_softmax in place"));
    const Tensor dy = dout.reshape({3, 11, 130});
    Tensor d1 = Tensor::empty(s.shape(), t), d2 = dy.clone();
    causal_softmax_backward(y, dy, 0.3f, d1);
    causal_softmax_backward(y, d2, 0.3f, d2);
    EXPECT_TRUE(all_close(d1, d2, Tolerance{}, "causal_softmax_backward in place"));
  }
}

// Accumulating ops add to what is there: twice the call = twice the contribution.
TEST(BackwardOps, AccumulatesIntoOutputs) {
  const Tensor ids = Tensor::from_ints({2, 0, 2, 1, 2}, {5});
  const Tensor dout = Tensor::rand_uniform({5, 4}, DType::f32, 8, -1.f, 1.f);
  Tensor once = Tensor::zeros({3, 4}, DType::f32), twice = Tensor::zeros({3, 4}, DType::f32);
  embedding_backward(ids, dout, once);
  embedding_backward(ids, dout, twice);
  embedding_backward(ids, dout, twice);
  const auto a = once.to_doubles(), b = twice.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], 2 * a[i], 1e-6);
  // row 2 = dout rows 0, 2, 4
  for (int64_t c = 0; c < 4; ++c)
    EXPECT_NEAR(once.at({2, c}), dout.at({0, c}) + dout.at({2, c}) + dout.at({4, c}), 1e-6);

  Tensor bias = Tensor::full({4}, DType::f32, 1.0);
  sum_to_row_accumulate(dout, bias);
  for (int64_t c = 0; c < 4; ++c) {
    double s = 1.0;
    for (int64_t r = 0; r < 5; ++r) s += dout.at({r, c});
    EXPECT_NEAR(bias.at({c}), s, 1e-6);
  }
}

}  // namespace
}  // namespace mixtrain::test
