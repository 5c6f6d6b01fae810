// Autograd: gradients of composite graphs against finite differences in double precision, the
// graph being freed by backward, no-grad scopes, and gradient accumulation into parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/internal.h"
#include "kernels/attention_ops.h"
#include "kernels/cpu/amx_tiles.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/tensor/memory.h"

using namespace mixtrain;
using namespace mixtrain::autograd;

namespace {

// Central differences of f with respect to every element of `x` (an f64 leaf), compared with the
// analytic gradient. h = 1e-6 balances truncation error (~h^2 * f''') and rounding error
// (~1e-16 / h) to about 1e-10 relative for these smooth functions; 1e-6 relative + 1e-8 absolute
// leaves a wide margin while catching any wrong term (errors of a wrong rule are O(1)).
void check_gradient(const std::function<Var()>& f, Var& x, const std::string& what,
                    int64_t max_checks = 400) {
  Var loss = f();
  loss.backward();
  const std::vector<double> analytic = x.grad().to_doubles();
  double* data = x.value().data<double>();
  const int64_t n = x.value().numel();
  const int64_t stride = std::max<int64_t>(1, n / max_checks);
  NoGradGuard ng;
  for (int64_t i = 0; i < n; i += stride) {
    const double saved = data[i];
    const double h = 1e-6;
    data[i] = saved + h;
    const double fp = f().value().item();
    data[i] = saved - h;
    const double fm = f().value().item();
    data[i] = saved;
    const double numeric = (fp - fm) / (2 * h);
    EXPECT_NEAR(analytic[static_cast<size_t>(i)], numeric, 1e-8 + 1e-6 * std::fabs(numeric))
        << what << " element " << i;
  }
}

Tensor rand64(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return Tensor::rand_uniform(s, DType::f32, seed, lo, hi).to(DType::f64);
}

}  // namespace

TEST(Autograd, MlpChainMatchesFiniteDifferences) {
  // x (4, 5) -> linear(5 -> 6) -> gelu -> layer_norm -> linear(6 -> 7) -> cross_entropy
  Var x(rand64({4, 5}, 1), true);
  Var w1(rand64({6, 5}, 2), true), b1(rand64({6}, 3), true);
  Var g(rand64({6}, 4, 0.5f, 1.5f), true), bb(rand64({6}, 5), true);
  Var w2(rand64({7, 6}, 6), true);
  const Tensor targets = Tensor::from_ints({0, 6, 3, -1}, {4});
  auto f = [&] {
    Var h = gelu(linear(x, w1, b1));
    h = layer_norm(h, g, bb, 1e-5f);
    return cross_entropy(linear(h, w2, Var()), targets);
  };
  for (Var* v : {&x, &w1, &b1, &g, &bb, &w2}) {
    v->impl()->grad = Tensor();
    check_gradient(f, *v, "mlp chain");
  }
}

TEST(Autograd, AttentionPiecesMatchFiniteDifferences) {
  // qkv (B=2, T=3, 3C=12) -> heads (H=2) -> causal softmax(q k^T) v -> merged -> mul/add/scale
  Var qkv(rand64({2, 3, 12}, 7), true);
  Var row(rand64({4}, 8), true);
  auto f = [&] {
    Var q = split_heads(qkv, 0, 2), k = split_heads(qkv, 1, 2), v = split_heads(qkv, 2, 2);
    Var att = causal_softmax(matmul(q, k, false, true), 0.5f);
    Var y = merge_heads(matmul(att, v), 2);  // (2, 3, 4)
    y = add(mul(y, row), scale(y, 0.3f));
    Var logits = reshape(y, {6, 4});
    return cross_entropy(logits, Tensor::from_ints({0, 1, 2, 3, 0, 1}, {6}));
  };
  check_gradient(f, qkv, "qkv");
  row.impl()->grad = Tensor();
  check_gradient(f, row, "row");
}

TEST(Autograd, FusedAttentionMatchesFiniteDifferences) {
  Var q(rand64({3, 5, 4}, 11), true), k(rand64({3, 5, 4}, 12), true), v(rand64({3, 5, 4}, 13), true);
  Var w(rand64({3, 5, 4}, 14), true);
  auto f = [&] {  // a weighted sum of the outputs, so every output element carries gradient
    Var y = attention(q, k, v, 0.7f);
    return cross_entropy(reshape(mul(y, w), {15, 4}), Tensor::from_ints(std::vector<int32_t>(15, 1), {15}));
  };
  check_gradient(f, q, "q");
  k.impl()->grad = Tensor();
  check_gradient(f, k, "k");
  v.impl()->grad = Tensor();
  check_gradient(f, v, "v");
}

// The fused op works on blocks of query rows and skips the masked keys, so its sums run over fewer
// (zero) terms in another blocking than matmul -> causal_softmax -> matmul: f32 results agree to
// a few f32 ulps of the largest value; in bf16 the composed graph also rounds the scores to bf16
// before the softmax (the fused op keeps them f32), so they agree to bf16 accuracy. T = 150 spans
// three query blocks, the last one partial.
TEST(Autograd, FusedAttentionEqualsTheComposedGraph) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Shape s{6, 150, 16};
    Var q(Tensor::randn(s, dt, 1), true), k(Tensor::randn(s, dt, 2), true), v(Tensor::randn(s, dt, 3), true);
    const Tensor dy = Tensor::randn(s, DType::f32, 4);
    auto run = [&](bool fused) {
      for (Var* x : {&q, &k, &v}) x->impl()->grad = Tensor();
      Var y = fused ? attention(q, k, v, 0.25f) : matmul(causal_softmax(matmul(q, k, false, true), 0.25f), v);
      Var loss = cross_entropy(reshape(mul(y, Var(dy.to(dt))), {6 * 150, 16}),
                               Tensor::from_ints(std::vector<int32_t>(6 * 150, 3), {6 * 150}));
      loss.backward();
      return std::vector<std::vector<double>>{y.value().to_doubles(), q.grad().to_doubles(),
                                              k.grad().to_doubles(), v.grad().to_doubles()};
    };
    const auto fused = run(true), composed = run(false);
    const char* names[] = {"y", "dq", "dk", "dv"};
    for (size_t t = 0; t < fused.size(); ++t) {
      double max_ref = 0;
      for (double x : composed[t]) max_ref = std::max(max_ref, std::fabs(x));
      // bf16: a few ulps (2^-8 relative each) of the largest value, from the rounded scores.
      const double tol = (dt == DType::f32 ? 16 * std::ldexp(1.0, -24) : 4 * std::ldexp(1.0, -8)) * max_ref;
      for (size_t i = 0; i < fused[t].size(); ++i)
        ASSERT_NEAR(fused[t][i], composed[t][i], tol) << dtype_name(dt) << " " << names[t] << "[" << i << "]";
    }
  }
}

// The encoder's fused attention against the composition it replaces (matmul -> masked_softmax ->
// dropout -> matmul): the same kernels on chunks of batch rows of the same operands, so the
// values and every gradient agree bit for bit in f32 and bf16 (the latter also under autocast),
// with dropout on and off, a padded batch row and a fully padded one. B = 11 rows of H = 12
// heads at T = 128 make three chunks (five rows each, then one). One exception: oneDNN's AMX bf16
// kernel sums a batched GEMM's products in an order that depends on the batch count (measured
// with oneDNN 3.2 on a Xeon with AMX: the autocast case with dropout differs in dk by 1.5e-8
// between the chunked op and the whole batch, and agrees bit for bit when one chunk holds every
// row; the largest gap seen, 1.5e-8 in a dk whose largest value is 1.1e-4, is about 2^-13 of it:
// bf16 roundings of sums that differ), so there they agree to one bf16 ulp of the largest value, as
// the causal attention's comparison above does.
TEST(Autograd, MaskedAttentionEqualsTheComposedGraph) {
  const int64_t B = 11, H = 12, T = 128, D = 8;
  std::vector<int32_t> m(static_cast<size_t>(B * T), 1);
  for (int64_t t = 100; t < T; ++t) m[static_cast<size_t>(2 * T + t)] = 0;  // row 2: 28 padded keys
  for (int64_t t = 0; t < T; ++t) m[static_cast<size_t>(5 * T + t)] = 0;    // row 5: all padding
  const Tensor mask = Tensor::from_ints(m, {B, T});
  const Shape s{B * H, T, D};
  struct Case {
    DType dt;
    bool autocast;  // f32 inputs under bf16 autocast
  };
  for (const Case c : {Case{DType::f32, false}, Case{DType::bf16, false}, Case{DType::f32, true}})
    for (float p : {0.f, 0.1f}) {
      const DType dt = c.dt;
      Var q(Tensor::randn(s, dt, 1), true), k(Tensor::randn(s, dt, 2), true),
          v(Tensor::randn(s, dt, 3), true);
      const Tensor dy = Tensor::randn(s, dt, 4);
      auto run = [&](bool fused) {
        for (Var* x : {&q, &k, &v}) x->impl()->grad = Tensor();
        AutocastScope scope(c.autocast, DType::bf16);
        Var y;
        if (fused) {
          y = masked_attention(q, k, v, mask, 0.35f, p, 99, 1234);
        } else {
          Var att = masked_softmax(matmul(q, k, false, true), mask, 0.35f);
          if (p != 0.f) att = dropout(att, p, 99, 1234);
          y = matmul(att, v);
        }
        Var loss = cross_entropy(
            reshape(mul(y, Var(dy)), {B * H * T, D}),
            Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(B * H * T), 3), {B * H * T}));
        loss.backward();
        return std::vector<std::vector<double>>{y.value().to_doubles(), q.grad().to_doubles(),
                                                k.grad().to_doubles(), v.grad().to_doubles()};
      };
      const auto fused = run(true), composed = run(false);
      const char* names[] = {"y", "dq", "dk", "dv"};
      const bool bf16_gemms = dt == DType::bf16 || c.autocast;
      const bool exact = !(bf16_gemms && gemm_impl_name(DType::bf16).find("amx") != std::string::npos);
      for (size_t t = 0; t < fused.size(); ++t) {
        double max_ref = 0;
        for (double x : composed[t]) max_ref = std::max(max_ref, std::fabs(x));
        for (size_t i = 0; i < fused[t].size(); ++i)
          ASSERT_NEAR(fused[t][i], composed[t][i], exact ? 0.0 : std::ldexp(max_ref, -8))
              << dtype_name(dt) << (c.autocast ? " autocast" : "") << " p " << p << " " << names[t] << "["
              << i << "]";
      }
    }
  // The fused op keeps q, k and v only: nothing of size T x T lives past it.
  Var q(Tensor::randn(s, DType::f32, 1), true), k(Tensor::randn(s, DType::f32, 2), true),
      v(Tensor::randn(s, DType::f32, 3), true);
  const int64_t before = MemoryTracker::current().snapshot().live[size_t(MemCategory::activations)];
  Var y = masked_attention(q, k, v, mask, 0.35f, 0.1f, 99, 0);
  const int64_t after = MemoryTracker::current().snapshot().live[size_t(MemCategory::activations)];
  EXPECT_EQ(after - before, int64_t(y.value().nbytes())) << "only the output is new";
  // Bad shapes: one line each.
  EXPECT_THROW(masked_attention(q, k, v, Tensor::from_ints({1, 1}, {1, 2}), 0.35f, 0.f, 0, 0), ShapeError);
  EXPECT_THROW(masked_attention(q, k, v, mask, 0.35f, 1.f, 0, 0), ArgumentError);
}

// attention_qkv reads q, k, v in place and writes the heads side by side: the same values and
// gradients as splitting, attending and merging (to a few f32 ulps, the blocks run as other GEMM
// shapes; to bf16 accuracy in bf16).
TEST(Autograd, AttentionQkvEqualsSplitAttendMerge) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t B = 3, T = 130, H = 4, D = 8, C = H * D;
    Var qkv(Tensor::randn({B, T, 3 * C}, dt, 5), true);
    const Tensor dy = Tensor::randn({B, T, C}, DType::f32, 6);
    auto run = [&](bool fused) {
      qkv.impl()->grad = Tensor();
      Var y = fused ? attention_qkv(qkv, H, 0.3f)
                    : merge_heads(attention(split_heads(qkv, 0, H), split_heads(qkv, 1, H),
                                            split_heads(qkv, 2, H), 0.3f),
                                  B);
      Var loss = cross_entropy(reshape(mul(y, Var(dy.to(dt))), {B * T, C}),
                               Tensor::from_ints(std::vector<int32_t>(B * T, 2), {B * T}));
      loss.backward();
      return std::vector<std::vector<double>>{y.value().to_doubles(), qkv.grad().to_doubles()};
    };
    const auto fused = run(true), composed = run(false);
    for (size_t t = 0; t < fused.size(); ++t) {
      double max_ref = 0;
      for (double x : composed[t]) max_ref = std::max(max_ref, std::fabs(x));
      const double tol = (dt == DType::f32 ? 16 * std::ldexp(1.0, -24) : 4 * std::ldexp(1.0, -8)) * max_ref;
      ASSERT_EQ(fused[t].size(), composed[t].size());
      for (size_t i = 0; i < fused[t].size(); ++i)
        ASSERT_NEAR(fused[t][i], composed[t][i], tol) << dtype_name(dt) << (t ? " dqkv[" : " y[") << i << "]";
    }
  }
}

// masked_attention_qkv against split_heads, masked_attention, merge_heads: the same kernel on the
// same heads either way (at head size 8 the composed one, at 32 in bf16 on a CPU with AMX the fused
// one, there reading the heads in place out of qkv), so the same bits. Dropout on, a padded batch
// row and a fully padded one.
TEST(Autograd, MaskedAttentionQkvEqualsSplitAttendMerge) {
  const int64_t B = 3, T = 45, H = 2;
  std::vector<int32_t> m(static_cast<size_t>(B * T), 1);
  for (int64_t t = 30; t < T; ++t) m[static_cast<size_t>(T + t)] = 0;
  for (int64_t t = 0; t < T; ++t) m[static_cast<size_t>(2 * T + t)] = 0;
  const Tensor mask = Tensor::from_ints(m, {B, T});
  for (int64_t D : {8, 32})
    for (DType dt : {DType::f32, DType::bf16}) {
      const int64_t C = H * D;
      Var qkv(Tensor::randn({B, T, 3 * C}, dt, 5), true);
      const Tensor dy = Tensor::randn({B, T, C}, dt, 6);
      auto run = [&](bool one_op) {
        qkv.impl()->grad = Tensor();
        Var y = one_op ? masked_attention_qkv(qkv, mask, H, 0.3f, 0.1f, 11, 500)
                       : merge_heads(masked_attention(split_heads(qkv, 0, H), split_heads(qkv, 1, H),
                                                      split_heads(qkv, 2, H), mask, 0.3f, 0.1f, 11, 500),
                                     B);
        Var loss = cross_entropy(reshape(mul(y, Var(dy)), {B * T, C}),
                                 Tensor::from_ints(std::vector<int32_t>(B * T, 2), {B * T}));
        loss.backward();
        return std::vector<std::vector<double>>{y.value().to_doubles(), qkv.grad().to_doubles()};
      };
      const auto one = run(true), composed = run(false);
      EXPECT_EQ(masked_attention_fused_applies(Tensor::zeros({B * H, T, D}, dt)),
                D == 32 && dt == DType::bf16 && cpu::tiles::amx_usable());
      for (size_t t = 0; t < one.size(); ++t) {
        ASSERT_EQ(one[t].size(), composed[t].size());
        for (size_t i = 0; i < one[t].size(); ++i)
          ASSERT_EQ(one[t][i], composed[t][i])
              << dtype_name(dt) << " D " << D << (t ? " dqkv[" : " y[") << i << "]";
      }
    }
}

// AttentionProbs::recompute keeps no probability blocks: backward makes them again from q and k
// with forward's GEMM and softmax, so outputs and gradients are the kept op's bit for bit, in every
// float dtype, for attention_qkv and attention, and the graph holds the blocks' bytes less. T =
// 150: three query blocks of 64, the last partial (one block on AMX; no multiple of 32, so the AMX
// fused kernel, which keeps its probabilities, runs on neither side).
TEST(Autograd, RecomputedAttentionProbabilitiesGiveTheKeptGradientsBitForBit) {
  const auto live_act = [] {
    return MemoryTracker::current().snapshot().live[static_cast<size_t>(MemCategory::activations)];
  };
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    for (bool qkv_op : {true, false}) {
      const int64_t B = 2, T = 150, H = 3, D = 8, C = H * D;
      Var qkv(Tensor::randn({B, T, 3 * C}, dt, 7), true);
      const Tensor dy = Tensor::randn({B, T, C}, dt, 8);
      auto run = [&](AttentionProbs probs, int64_t& graph_bytes) {
        qkv.impl()->grad = Tensor();
        Var q, k, v;
        if (!qkv_op) q = split_heads(qkv, 0, H), k = split_heads(qkv, 1, H), v = split_heads(qkv, 2, H);
        const int64_t before = live_act();
        Var y = qkv_op ? attention_qkv(qkv, H, 0.3f, probs) : merge_heads(attention(q, k, v, 0.3f, probs), B);
        graph_bytes = live_act() - before;
        Var loss = cross_entropy(reshape(mul(y, Var(dy)), {B * T, C}),
                                 Tensor::from_ints(std::vector<int32_t>(B * T, 2), {B * T}));
        loss.backward();
        return std::vector<std::vector<double>>{y.value().to_doubles(), qkv.grad().to_doubles()};
      };
      int64_t kept_bytes = 0, recomputed_bytes = 0;
      const auto kept = run(AttentionProbs::keep, kept_bytes);
      const auto recomputed = run(AttentionProbs::recompute, recomputed_bytes);
      const std::string what = std::string(dtype_name(dt)) + (qkv_op ? " attention_qkv" : " attention");
      EXPECT_EQ(kept[0], recomputed[0]) << what << ": y";
      EXPECT_EQ(kept[1], recomputed[1]) << what << ": dqkv";
      int64_t blocks = 0;  // rows x keys of every query block: T x T's lower part, block by block
      const int64_t Tb = attention_query_block(T, dt);
      for (int64_t r0 = 0; r0 < T; r0 += Tb) blocks += (std::min(T, r0 + Tb) - r0) * std::min(T, r0 + Tb);
      EXPECT_EQ(kept_bytes - recomputed_bytes, B * H * blocks * int64_t(dtype_size(dt))) << what;
    }
  }
}

TEST(Autograd, AttentionQkvMatchesFiniteDifferences) {
  Var qkv(rand64({2, 70, 12}, 21), true), w(rand64({2, 70, 4}, 22), true);
  auto f = [&] {
    Var y = attention_qkv(qkv, 2, 0.6f);  // 70 rows: two query blocks
    return cross_entropy(reshape(mul(y, w), {140, 4}),
                         Tensor::from_ints(std::vector<int32_t>(140, 1), {140}));
  };
  check_gradient(f, qkv, "qkv");
}

// The graph keeps only what backward reads: a value no rule needs is freed when its last Var
// goes, one a rule reads stays until backward.
TEST(Autograd, ValuesBackwardDoesNotReadAreFreedEarly) {
  const auto live_act = [] {
    return MemoryTracker::global().snapshot().live[static_cast<size_t>(MemCategory::activations)];
  };
  Var x(Tensor::randn({64, 256}, DType::f32, 1), true);
  const int64_t bytes = 64 * 64 * 4;
  Var scores = matmul(x, x, false, true);   // (64, 64): read by nobody's backward below
  Var probs = causal_softmax(scores, 1.f);  // keeps its output, not its input
  const int64_t with_scores = live_act();
  scores = Var();
  EXPECT_EQ(live_act(), with_scores - bytes) << "the softmax input should be freed";
  Var h = gelu(probs);  // gelu reads its input: probs must stay alive
  const int64_t with_probs = live_act();
  probs = Var();
  EXPECT_EQ(live_act(), with_probs) << "the gelu input must be kept for backward";
  Var loss = cross_entropy(h, Tensor::from_ints(std::vector<int32_t>(64, 0), {64}));
  loss.backward();
  // Same gradient as a graph built without dropping anything.
  const std::vector<double> g1 = x.grad().to_doubles();
  x.impl()->grad = Tensor();
  Var s2 = matmul(x, x, false, true);
  Var p2 = causal_softmax(s2, 1.f);
  cross_entropy(gelu(p2), Tensor::from_ints(std::vector<int32_t>(64, 0), {64})).backward();
  EXPECT_EQ(x.grad().to_doubles(), g1);
}

// A linear fed straight by an activation keeps nothing of its input: backward makes the
// activation's output again from the input the activation's node keeps (Node::recompute_x), and
// the gradients are those of a graph that keeps it (a scale by 1 between the two, which is exact
// and stops the recompute), bit for bit, for each activation, in fp32 and bf16.
TEST(Autograd, ALinearAfterAnActivationRecomputesItsInputBitForBit) {
  const auto live_act = [] {
    return MemoryTracker::global().snapshot().live[static_cast<size_t>(MemCategory::activations)];
  };
  using Act = Var (*)(const Var&);
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [name, act] : {std::pair<const char*, Act>{"gelu", gelu},
                             {"gelu_erf", gelu_erf},
                             {"relu", relu},
                             {"tanh", autograd::tanh}}) {
      const std::string what = std::string(name) + " " + std::string(dtype_name(dt));
      Var x(Tensor::randn({48, 40}, dt, 1), true);
      Var w1(Tensor::randn({64, 40}, dt, 2, 0.f, 0.2f), true),
          w2(Tensor::randn({24, 64}, dt, 3, 0.f, 0.2f), true);
      Var b2(Tensor::randn({24}, dt, 4), true);
      const Tensor targets = Tensor::from_ints(std::vector<int32_t>(48, 5), {48});
      auto run = [&](bool keep) {
        for (Var* v : {&x, &w1, &w2, &b2}) v->impl()->grad = Tensor();
        Var pre = linear(x, w1, Var());  // (48, 64)
        Var h = act(pre);
        if (keep) h = scale(h, 1.f);
        const int64_t before = live_act();
        Var out = linear(h, w2, b2);
        EXPECT_EQ(out.impl()->grad_fn->recompute_x, !keep) << what;
        EXPECT_EQ(out.impl()->grad_fn->in_values[0].defined(), keep) << what;
        pre = Var();
        h = Var();  // the activation's output: freed at once unless the second linear keeps it
        const int64_t h_bytes = 48 * 64 * static_cast<int64_t>(dtype_size(dt));
        EXPECT_EQ(live_act() - before, 24 * 48 * static_cast<int64_t>(dtype_size(dt)) - (keep ? 0 : h_bytes))
            << what;
        cross_entropy(out, targets).backward();
        std::vector<std::vector<double>> g;
        for (Var* v : {&x, &w1, &w2, &b2}) g.push_back(v->grad().to_doubles());
        return g;
      };
      EXPECT_EQ(run(false), run(true)) << what;
    }
}

// The fused LM head: its loss and gradients are the unfused matmul + cross_entropy's, in double
// (to the rounding of the sums) for every chunk size, with ignored rows; and against finite
// differences.
TEST(Autograd, LmHeadLossIsTheUnfusedHeadInDouble) {
  Var x(rand64({2, 5, 6}, 11), true);  // (B, T, C)
  Var w(rand64({9, 6}, 12), true);     // (V, C)
  const Tensor targets = Tensor::from_ints({0, 8, 3, -1, 5, 2, -1, 7, 1, 4}, {2, 5});
  Var ref = cross_entropy(matmul(x, w, false, true), targets);
  ref.backward();
  const std::vector<double> gx = x.grad().to_doubles(), gw = w.grad().to_doubles();
  for (int64_t chunk : {1, 3, 4, 10, 64}) {
    x.impl()->grad = Tensor();
    w.impl()->grad = Tensor();
    Var loss = lm_head_loss(x, w, targets, chunk);
    EXPECT_NEAR(loss.value().item(), ref.value().item(), 1e-14) << chunk;
    scale(loss, 3.f).backward();  // the upstream gradient reaches both inputs
    const std::vector<double> fx = x.grad().to_doubles(), fw = w.grad().to_doubles();
    for (size_t i = 0; i < gx.size(); ++i)
      EXPECT_NEAR(fx[i], 3 * gx[i], 1e-14) << "dx " << i << " chunk " << chunk;
    for (size_t i = 0; i < gw.size(); ++i)
      EXPECT_NEAR(fw[i], 3 * gw[i], 1e-14) << "dw " << i << " chunk " << chunk;
  }
  for (Var* v : {&x, &w}) {
    v->impl()->grad = Tensor();
    check_gradient([&] { return lm_head_loss(x, w, targets, 4); }, *v, "lm_head_loss");
  }
}

// Under bf16 autocast: the unfused head's loss and gradients within the rounding of their sums
// (the logits the same bf16 GEMM, the loss summed in double, dw over chunks in fp32), and no
// logits tensor of the whole batch is ever allocated.
TEST(Autograd, LmHeadLossUnderAutocastMatchesTheUnfusedHead) {
  const int64_t N = 96, C = 16, V = 4000;  // the logits dominate
  Var x(Tensor::randn({N, C}, DType::f32, 21), true);
  Var w(Tensor::randn({V, C}, DType::f32, 22, 0.f, 0.1f), true);
  std::vector<int32_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[size_t(i)] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 37) % V);
  const Tensor targets = Tensor::from_ints(t, {N});
  // bf16: the gradients made in forward, scaled in backward; fp16: made in backward from the
  // scaled upstream gradient (a loss scale of 1024 here), as the unfused head's are.
  for (DType ac : {DType::bf16, DType::f16}) {
    auto run = [&](bool fused, int64_t* peak_extra) {
      x.impl()->grad = Tensor();
      w.impl()->grad = Tensor();
      AutocastScope scope(true, ac);
      MemoryTracker::global().reset_peaks();
      const int64_t live0 = MemoryTracker::global().snapshot().live_total;
      Var loss = fused ? lm_head_loss(x, w, targets, 16) : cross_entropy(matmul(x, w, false, true), targets);
      scale(loss, 1024.f).backward();
      *peak_extra = MemoryTracker::global().snapshot().peak_total - live0;
      return std::pair{loss.value().item(), std::pair{x.grad().to_floats(), w.grad().to_floats()}};
    };
    const std::string what(dtype_name(ac));
    int64_t peak_unfused = 0, peak_fused = 0;
    const auto [l0, g0] = run(false, &peak_unfused);
    const auto [l1, g1] = run(true, &peak_fused);
    EXPECT_NEAR(l1, l0, 1e-6 * std::abs(l0)) << what;
    for (auto [a, b] : {std::pair{&g0.first, &g1.first}, std::pair{&g0.second, &g1.second}}) {
      ASSERT_EQ(a->size(), b->size());
      double max_abs = 0, max_diff = 0;
      for (size_t i = 0; i < a->size(); ++i) {
        max_abs = std::max(max_abs, std::abs(double((*a)[i])));
        max_diff = std::max(max_diff, std::abs(double((*a)[i]) - double((*b)[i])));
      }
      EXPECT_GT(max_abs, 0) << what;
      EXPECT_LE(max_diff, 1e-2 * max_abs) << what << ": 16-bit rounding of the gradients at most";
    }
    // The fused head's whole peak (the casts of x and w, dw, chunks of 16 rows) stays below the
    // size of the fp32 logits; and it saves at least their 16-bit size against the unfused head.
    EXPECT_LT(peak_fused, N * V * 4) << what << " " << peak_fused;
    EXPECT_GE(peak_unfused - peak_fused, N * V * 2) << what << " " << peak_unfused << " vs " << peak_fused;
  }
}

// Where the 16-bit GEMMs convert their inputs to fp32, the fused head converts its weight once and
// each chunk's operands once (lm_head_gemm_weight, lm_head_gemm_operand): its three GEMMs give the
// 16-bit GEMMs' own bits (elsewhere the operands are the 16-bit tensors themselves).
TEST(Autograd, LmHeadGemmOperandsGiveThe16BitGemmsBits) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tensor x = Tensor::randn({40, 48}, dt, 31), w = Tensor::randn({1000, 48}, dt, 32, 0.f, 0.2f);
    const Tensor dl = Tensor::randn({40, 1000}, dt, 33, 0.f, 0.01f);
    const Tensor wg = lm_head_gemm_weight(w), xg = lm_head_gemm_operand(x, wg),
                 dlg = lm_head_gemm_operand(dl, wg);
    EXPECT_EQ(wg.dtype(), gemm_converts_to_f32(dt) ? DType::f32 : dt);
    const std::string what(dtype_name(dt));
    EXPECT_EQ(lm_head_logits(x, w, dt).to_doubles(), lm_head_logits(xg, wg, dt).to_doubles())
        << what << " logits";
    Tensor dx0 = Tensor::empty({40, 48}, dt), dx1 = Tensor::empty({40, 48}, dt);
    gemm(dl, w, dx0);
    gemm(dlg, wg, dx1);
    EXPECT_EQ(dx0.to_doubles(), dx1.to_doubles()) << what << " dx";
    Tensor dw0 = Tensor::zeros({1000, 48}, DType::f32), dw1 = Tensor::zeros({1000, 48}, DType::f32);
    GemmOptions t;
    t.trans_a = true;
    t.beta = 1.f;
    gemm(dl, x, dw0, t);
    gemm(dlg, xg, dw1, t);
    EXPECT_EQ(dw0.to_doubles(), dw1.to_doubles()) << what << " dw";
  }
}

TEST(Autograd, TinyGptMatchesFiniteDifferencesInDouble) {
  GptConfig c;
  c.vocab_size = 11, c.block_size = 5, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
  Gpt model(c, 3, DType::f64, DType::f64);
  // Non-trivial biases and gains so every path carries gradient.
  for (size_t i = 0; i < model.params().size(); ++i) {
    Tensor p = model.params().param(i);
    p.copy_from(Tensor::rand_uniform(p.shape(), DType::f32, 100 + i, -0.3f, 0.3f).to(DType::f64));
  }
  const Tensor idx = Tensor::from_ints({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  const Tensor tgt = Tensor::from_ints({2, 3, 4, 5, 6, 7, 8, 9}, {2, 4});
  model.params().zero_grads();
  Var loss = model.forward(idx, &tgt).loss;
  loss.backward();
  const Tensor flat = model.params().flat_params();
  const std::vector<double> analytic = model.params().flat_grads().to_doubles();
  double* p = flat.data<double>();
  NoGradGuard ng;
  int checked = 0;
  for (const auto& info : model.params().infos()) {
    for (int64_t j = 0; j < info.numel; j += std::max<int64_t>(1, info.numel / 7)) {
      const int64_t i = info.offset + j;
      const double saved = p[i], h = 1e-6;
      p[i] = saved + h;
      const double fp = model.forward(idx, &tgt).loss.value().item();
      p[i] = saved - h;
      const double fm = model.forward(idx, &tgt).loss.value().item();
      p[i] = saved;
      const double numeric = (fp - fm) / (2 * h);
      EXPECT_NEAR(analytic[static_cast<size_t>(i)], numeric, 1e-8 + 1e-6 * std::fabs(numeric))
          << info.name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(Autograd, BackwardFreesTheGraph) {
  GptConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  Gpt model(c, 1);
  const Tensor idx = Tensor::from_ints(std::vector<int32_t>(32, 3), {2, 16});
  const auto live_act = [] {
    return MemoryTracker::global().snapshot().live[static_cast<size_t>(MemCategory::activations)];
  };
  const int64_t before = live_act();
  {
    Var loss = model.forward(idx, &idx).loss;
    EXPECT_GT(live_act(), before);  // activations saved for backward
    loss.backward();
  }
  EXPECT_EQ(live_act(), before) << "activations still alive after backward";
}

TEST(Autograd, NoGradRecordsNothingAndGradientsAccumulate) {
  Var w(Tensor::from_vector({1, 2, 3}, {3}, DType::f32), true);
  Var x(Tensor::from_vector({2, 2, 2}, {3}, DType::f32));
  {
    NoGradGuard ng;
    Var y = mul(x, w);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.impl()->grad_fn, nullptr);
  }
  EXPECT_TRUE(grad_enabled());
  // Parameter-style leaf: gradients accumulate into the buffer across two backward passes.
  Tensor buf = Tensor::zeros({3, 1}, DType::f32);
  Var p = Var::parameter(Tensor::from_vector({0.5, -1, 2}, {3, 1}, DType::f32), buf);
  for (int rep = 0; rep < 2; ++rep) {
    Var logits = reshape(p, {1, 3});
    cross_entropy(logits, Tensor::from_ints({1}, {1})).backward();
  }
  const auto g = buf.to_doubles();
  // d/dlogits CE = softmax - onehot; twice.
  const double e0 = std::exp(0.5), e1 = std::exp(-1.0), e2 = std::exp(2.0), s = e0 + e1 + e2;
  EXPECT_NEAR(g[0], 2 * e0 / s, 1e-6);
  EXPECT_NEAR(g[1], 2 * (e1 / s - 1), 1e-6);
  EXPECT_NEAR(g[2], 2 * e2 / s, 1e-6);
}

TEST(Autograd, ErrorsAreTyped) {
  Var a(Tensor::zeros({2, 3}, DType::f32), true);
  EXPECT_THROW(add(a, a).backward(), ShapeError);  // not a scalar
  Var b(Tensor::zeros({4, 5}, DType::f32), true);
  EXPECT_THROW(matmul(a, b), ShapeError);
  Var c(Tensor::zeros({1}, DType::f32));
  EXPECT_THROW(c.backward(), ArgumentError);  // nothing requires grad
  EXPECT_THROW(split_heads(a, 0, 2), ShapeError);
  Var qkv(Tensor::zeros({2, 3, 12}, DType::f32), true);
  EXPECT_THROW(split_heads(qkv, 3, 2), ArgumentError);   // which is 0, 1 or 2
  EXPECT_THROW(attention_qkv(qkv, 3, 1.f), ShapeError);  // C = 4 is not divisible by 3 heads
  EXPECT_THROW(attention_qkv(a, 1, 1.f), ShapeError);    // not (B, T, 3C)
}

TEST(Autograd, DropoutIsSeededScaledAndDifferentiable) {
  Var x(Tensor::full({200, 50}, DType::f64, 1.0), true);
  Var a = dropout(x, 0.25f, 9, 0);
  Var b = dropout(x, 0.25f, 9, 0);
  Var c = dropout(x, 0.25f, 10, 0);
  EXPECT_EQ(a.value().to_doubles(), b.value().to_doubles());  // same seed, same mask
  EXPECT_NE(a.value().to_doubles(), c.value().to_doubles());
  int64_t kept = 0;
  for (double v : a.value().to_doubles()) {
    ASSERT_TRUE(v == 0.0 || std::fabs(v - 1.0 / 0.75) < 1e-12) << v;  // inverted dropout scaling
    kept += v != 0.0;
  }
  // 10000 Bernoulli(0.75) draws: sd 43; 5 sd bounds.
  EXPECT_NEAR(static_cast<double>(kept), 7500.0, 220.0);
  // p = 0 and eval mode are the identity (no node recorded).
  EXPECT_EQ(dropout(x, 0.f, 1, 0).impl(), x.impl());
  EXPECT_EQ(dropout(x, 0.5f, 1, 0, /*training=*/false).impl(), x.impl());
  EXPECT_THROW(dropout(x, 1.0f, 1, 0), ArgumentError);
  // With the mask fixed by (seed, offset), dropout is linear: check its gradient numerically.
  Var y(rand64({6, 7}, 11), true);
  auto f = [&] {
    return cross_entropy(dropout(y, 0.3f, 5, 100), Tensor::from_ints({0, 1, 2, 3, 4, 5}, {6}));
  };
  check_gradient(f, y, "dropout");
}

// backward_hook (ZeRO-3's gather points): y = x, the same tensor; backward calls the hook on y
// before the ops that made x go back, and passes the gradient on unchanged; without gradients
// nothing is recorded and the hook never runs.
TEST(Autograd, BackwardHookRunsBeforeTheOpsBelowItAndPassesTheGradientOn) {
  std::vector<std::string> order;
  Var x(Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::f32, MemCategory::workspace), true);
  Var w(Tensor::from_vector({0.5, -1, 2, 0.25}, {2, 2}, DType::f32, MemCategory::workspace), true);
  const Var in = backward_hook(x, [&] { order.push_back("below"); });
  const Var h = mul(in, w);
  const Var y = backward_hook(h, [&] {
    order.push_back("above");
    EXPECT_FALSE(w.grad().defined()) << "mul went back before the hook above it";
  });
  EXPECT_EQ(y.value().raw_data(), h.value().raw_data());  // the same tensor, not a copy
  Var loss = cross_entropy(y, Tensor::from_ints({1, 0}, {2}));
  loss.backward();
  EXPECT_EQ(order, (std::vector<std::string>{"above", "below"}));
  // The gradients are those of the graph without the hooks.
  Var x2(x.value(), true), w2(w.value(), true);
  Var loss2 = cross_entropy(mul(x2, w2), Tensor::from_ints({1, 0}, {2}));
  loss2.backward();
  EXPECT_EQ(x.grad().to_doubles(), x2.grad().to_doubles());
  EXPECT_EQ(w.grad().to_doubles(), w2.grad().to_doubles());
  NoGradGuard no_grad;
  const Var z = backward_hook(x, [&] { order.push_back("never"); });
  EXPECT_EQ(z.impl().get(), x.impl().get());  // x itself: nothing recorded
}
