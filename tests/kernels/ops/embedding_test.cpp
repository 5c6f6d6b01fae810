// Embedding lookup: fast CPU kernel vs the scalar reference over odd and large widths, (R) and
// (B, T) ids, every f32/bf16/f16 weight -> out combination, strided weights and outputs; exact
// copies; thread-count determinism.
#include <cstring>

#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"

namespace mixtrain::test {
namespace {

// Deterministic ids in [0, V) from a seed (a small LCG: no dependence on the library's RNG).
std::vector<int32_t> make_ids(int64_t n, int64_t V, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& id : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(V));
  }
  return ids;
}

enum Flags { kIds2d = 1, kStridedOut = 2 };

// sizes = {V, C, R}
struct EmbeddingTest : OpTest {
  std::string name() const override { return "embedding"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c;
    uint64_t seed = 1;
    auto push = [&](int64_t V, int64_t C, int64_t R, DType in, DType out, bool nc, int flags) {
      OpConfig k;
      k.sizes = {V, C, R};
      k.in = in;
      k.out = out;
      k.non_contiguous = nc;
      k.flags = flags;
      k.seed = seed++;
      k.label = std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) +
                " V=" + std::to_string(V) + " C=" + std::to_string(C) + " R=" + std::to_string(R) +
                (nc ? " strided" : "") + (flags & kIds2d ? " ids(B,T)" : "") +
                (flags & kStridedOut ? " strided-out" : "");
      c.push_back(k);
    };
    const DType ts[] = {DType::f32, DType::bf16, DType::f16};
    for (auto [V, C, R] : {std::tuple{1, 1, 1}, std::tuple{5, 3, 7}, std::tuple{50, 17, 33},
                           std::tuple{50, 1003, 12}, std::tuple{7, 4, 0}})
      for (DType in : ts)
        for (DType out : ts) push(V, C, R, in, out, false, 0);
    for (DType t : ts) {
      push(50, 17, 12, t, t, true, kIds2d);
      push(50, 33, 12, t, DType::f32, false, kIds2d | kStridedOut);
    }
    push(1000, 4099, 256, DType::f32, DType::f32, false, 0);
    push(1000, 4099, 256, DType::bf16, DType::f32, false, kIds2d);
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const int64_t V = cfg.sizes[0], C = cfg.sizes[1], R = cfg.sizes[2];
    const Tensor w = make_input({V, C}, cfg.in, cfg.seed, cfg.non_contiguous);
    const Shape id_shape = (cfg.flags & kIds2d) ? Shape{3, R / 3} : Shape{R};
    const Tensor ids = Tensor::from_ints(make_ids(id_shape.numel(), V, cfg.seed), id_shape);
    const int64_t n = ids.numel();
    Tensor out;
    if (cfg.flags & kStridedOut)
      out = Tensor::full({n, C + 2}, cfg.out, 5.0).slice(1, 1, 1 + C);
    else if (cfg.flags & kIds2d)
      out = Tensor::empty({3, R / 3, C}, cfg.out);
    else
      out = Tensor::empty({n, C}, cfg.out);
    (reference ? ref::embedding : mixtrain::embedding)(w, ids, out);
    return {out};
  }
  // A copy with one rounding (weight -> out): fast and reference agree to within that rounding
  // (in fact bit for bit; the default budget is kept for uniformity).
};
// The configurations large enough to be split across threads (the 1-vs-2-threads check).
bool split_across_threads(const OpConfig& cfg) { return cfg.sizes[1] * cfg.sizes[2] >= 100000; }

MIXTRAIN_REGISTER_OP_TEST_THREADS(EmbeddingTest, split_across_threads);

TEST(EmbeddingOps, CopiesRowsExactly) {
  const Tensor w = Tensor::from_vector({0.5, 1.5, -2.0, 3.25, 1e-3, -7.0}, {3, 2}, DType::f64);
  const Tensor ids = Tensor::from_ints({2, 0, 2, 1}, {4});
  Tensor out = Tensor::empty({4, 2}, DType::f64);
  embedding(w, ids, out);
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{1e-3, -7.0, 0.5, 1.5, 1e-3, -7.0, -2.0, 3.25}));
  // f32 weight -> bf16 out rounds once (1e-3 is not a bf16 value).
  Tensor ob = Tensor::empty({4, 2}, DType::bf16);
  embedding(w.to(DType::f32), ids, ob);
  EXPECT_EQ(ob.at({0, 0}), Tensor::from_vector({1e-3}, {1}, DType::bf16).at({0}));
  EXPECT_EQ(ob.at({3, 1}), 3.25);
}

}  // namespace
}  // namespace mixtrain::test
