// Autocast: the output dtype of every autograd op against the policy table (bf16 and f16, f32
// and mixed inputs), nesting and thread-local state, and the weight-cast cache (one cast per
// parameter per region, cleared at the outermost exit, never from no-grad, never stale after an
// in-place update, gradients reaching the fp32 gradient buffer).
#include "mixtrain/amp/autocast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "autograd/cast_hook.h"
#include "mixtrain/autograd/fp8_linear.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/numeric/bf16.h"

using namespace mixtrain;
using namespace mixtrain::autograd;

namespace {

int64_t live_bytes(MemCategory c) { return MemoryTracker::global().snapshot().live[static_cast<size_t>(c)]; }

Tensor rnd(const Shape& s, DType t, uint64_t seed) {
  return Tensor::rand_uniform(s, DType::f32, seed, -1.f, 1.f).to(t);
}

// One op of the harness: input shapes and a builder; `dtypes` chooses each input's dtype.
struct OpCase {
  OpKind op;
  std::vector<Shape> shapes;
  std::function<Var(const std::vector<Var>&)> run;
};

const Tensor kIds = Tensor::from_ints({0, 3, 1, 2, 3, 0}, {2, 3});

std::vector<OpCase> op_cases() {
  return {
      {OpKind::matmul, {{2, 3, 4}, {2, 4, 5}}, [](const std::vector<Var>& v) { return matmul(v[0], v[1]); }},
      {OpKind::linear,
       {{2, 3, 4}, {5, 4}, {5}},
       [](const std::vector<Var>& v) { return linear(v[0], v[1], v[2]); }},
      {OpKind::add, {{2, 3, 4}, {2, 3, 4}}, [](const std::vector<Var>& v) { return add(v[0], v[1]); }},
      {OpKind::mul, {{2, 3, 4}, {4}}, [](const std::vector<Var>& v) { return mul(v[0], v[1]); }},
      {OpKind::scale, {{2, 3, 4}}, [](const std::vector<Var>& v) { return scale(v[0], 0.5f); }},
      {OpKind::gelu, {{2, 3, 4}}, [](const std::vector<Var>& v) { return gelu(v[0]); }},
      {OpKind::layer_norm,
       {{2, 3, 4}, {4}, {4}},
       [](const std::vector<Var>& v) { return layer_norm(v[0], v[1], v[2], 1e-5f); }},
      {OpKind::embedding, {{4, 5}}, [](const std::vector<Var>& v) { return embedding(v[0], kIds); }},
      {OpKind::causal_softmax,
       {{2, 3, 3}},
       [](const std::vector<Var>& v) { return causal_softmax(v[0], 0.5f); }},
      {OpKind::cross_entropy,
       {{2, 3, 4}},
       [](const std::vector<Var>& v) {
         return cross_entropy(v[0], Tensor::from_ints({0, 1, 2, 3, -1, 1}, {2, 3}));
       }},
      {OpKind::reshape,
       {{2, 3, 4}},
       [](const std::vector<Var>& v) {
         return reshape(v[0], {6, 4});
       }},
      {OpKind::split_heads, {{2, 3, 12}}, [](const std::vector<Var>& v) { return split_heads(v[0], 1, 2); }},
      {OpKind::merge_heads, {{4, 3, 2}}, [](const std::vector<Var>& v) { return merge_heads(v[0], 2); }},
      {OpKind::dropout, {{2, 3, 4}}, [](const std::vector<Var>& v) { return dropout(v[0], 0.25f, 7, 0); }},
      {OpKind::cast, {{2, 3, 4}}, [](const std::vector<Var>& v) { return cast(v[0], DType::f16); }},
      {OpKind::attention,
       {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
       [](const std::vector<Var>& v) { return attention(v[0], v[1], v[2], 0.5f); }},
      {OpKind::attention_qkv,
       {{2, 3, 12}},
       [](const std::vector<Var>& v) { return attention_qkv(v[0], 2, 0.5f); }},
      {OpKind::checkpoint,
       {{2, 3, 4}},
       [](const std::vector<Var>& v) {
         return checkpoint([](const Var& a) { return scale(a, 2.f); }, v[0]);
       }},
      {OpKind::gelu_erf, {{2, 3, 4}}, [](const std::vector<Var>& v) { return gelu_erf(v[0]); }},
      {OpKind::tanh, {{2, 3, 4}}, [](const std::vector<Var>& v) { return autograd::tanh(v[0]); }},
      {OpKind::relu, {{2, 3, 4}}, [](const std::vector<Var>& v) { return relu(v[0]); }},
      {OpKind::masked_softmax,
       {{4, 3, 3}},
       [](const std::vector<Var>& v) {
         return masked_softmax(v[0], Tensor::from_ints({1, 1, 0, 1, 0, 0}, {2, 3}), 0.5f);
       }},
      {OpKind::masked_attention,
       {{4, 3, 2}, {4, 3, 2}, {4, 3, 2}},
       [](const std::vector<Var>& v) {
         return masked_attention(v[0], v[1], v[2], Tensor::from_ints({1, 1, 0, 1, 0, 0}, {2, 3}), 0.5f, 0.25f,
                                 7, 0);
       }},
      {OpKind::masked_attention_qkv,
       {{2, 3, 6}},
       [](const std::vector<Var>& v) {
         return masked_attention_qkv(v[0], Tensor::from_ints({1, 1, 0, 1, 0, 0}, {2, 3}), 1, 0.5f, 0.25f, 7,
                                     0);
       }},
      {OpKind::fp8_linear,
       {{2, 3, 4}, {5, 4}, {5}},
       [](const std::vector<Var>& v) { return fp8_linear(v[0], v[1], v[2], std::make_shared<Fp8Site>()); }},
      {OpKind::lm_head_loss,
       {{2, 3, 4}, {5, 4}},
       [](const std::vector<Var>& v) {
         return lm_head_loss(v[0], v[1], Tensor::from_ints({0, 4, 2, -1, 1, 3}, {2, 3}), 2);
       }},
      {OpKind::backward_hook,
       {{2, 3, 4}},
       [](const std::vector<Var>& v) { return backward_hook(v[0], [] {}); }},
  };
}

// What the table says the output dtype must be.
DType expected_dtype(OpKind op, const std::vector<DType>& in, DType ac) {
  if (op == OpKind::cast) return DType::f16;          // the explicit dtype of the harness's cast
  if (op == OpKind::lm_head_loss) return DType::f32;  // its GEMMs lowered, its output the fp32 loss
  switch (autocast_policy(op)) {
    case CastPolicy::lower_precision:
      return ac;
    case CastPolicy::fp32:
      return DType::f32;
    case CastPolicy::promote: {
      DType w = in[0];
      for (DType t : in)
        if (t != w) w = dtype_size(t) != dtype_size(w) ? (dtype_size(t) > dtype_size(w) ? t : w) : DType::f32;
      return w;
    }
    case CastPolicy::keep:
      return in[0];
  }
  return DType::f64;
}

std::string dtypes_str(const std::vector<DType>& d) {
  std::string s;
  for (DType t : d) {
    if (!s.empty()) s += ',';
    s += dtype_name(t);
  }
  return s;
}

void check_case(const OpCase& c, const std::vector<DType>& dtypes, DType ac) {
  std::vector<Var> in;
  for (size_t i = 0; i < c.shapes.size(); ++i) in.emplace_back(rnd(c.shapes[i], dtypes[i], 10 + i), true);
  Var out;
  {
    AutocastScope scope(true, ac);
    out = c.run(in);
  }
  EXPECT_EQ(out.dtype(), expected_dtype(c.op, dtypes, ac))
      << op_kind_name(c.op) << " (" << cast_policy_name(autocast_policy(c.op)) << ") inputs "
      << dtypes_str(dtypes) << " under " << dtype_name(ac);
}

}  // namespace

TEST(Autocast, PolicyTableCoversEveryOpAndFollowsTorchLists) {
  // The table, printed for the log (ctest -V), and pinned op by op.
  for (size_t i = 0; i < kNumOpKinds; ++i) {
    const auto k = static_cast<OpKind>(i);
    std::printf("  %-15s %s\n", std::string(op_kind_name(k)).c_str(),
                std::string(cast_policy_name(autocast_policy(k))).c_str());
  }
  EXPECT_EQ(autocast_policy(OpKind::matmul), CastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy(OpKind::linear), CastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy(OpKind::attention), CastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy(OpKind::layer_norm), CastPolicy::fp32);
  EXPECT_EQ(autocast_policy(OpKind::causal_softmax), CastPolicy::fp32);
  EXPECT_EQ(autocast_policy(OpKind::masked_softmax), CastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy(OpKind::masked_attention), CastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy(OpKind::masked_attention_qkv), CastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy(OpKind::cross_entropy), CastPolicy::fp32);
  EXPECT_EQ(autocast_policy(OpKind::lm_head_loss),
            CastPolicy::lower_precision);  // as matmul + the loss in fp32
  EXPECT_EQ(autocast_policy(OpKind::add), CastPolicy::promote);
  EXPECT_EQ(autocast_policy(OpKind::mul), CastPolicy::promote);
  for (OpKind k : {OpKind::scale, OpKind::gelu, OpKind::embedding, OpKind::reshape, OpKind::split_heads,
                   OpKind::merge_heads, OpKind::dropout, OpKind::cast, OpKind::gelu_erf, OpKind::tanh,
                   OpKind::relu, OpKind::backward_hook})
    EXPECT_EQ(autocast_policy(k), CastPolicy::keep) << op_kind_name(k);
  // The harness has one case per op.
  const auto cases = op_cases();
  ASSERT_EQ(cases.size(), kNumOpKinds);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(static_cast<size_t>(cases[i].op), i);
}

TEST(Autocast, EveryOpOutputDtypeWithF32InputsFollowsTheTable) {
  for (DType ac : {DType::bf16, DType::f16})
    for (const OpCase& c : op_cases()) check_case(c, std::vector<DType>(c.shapes.size(), DType::f32), ac);
}

TEST(Autocast, EveryOpOutputDtypeWithMixedAnd16BitInputsFollowsTheTable) {
  const DType all[] = {DType::f32, DType::bf16, DType::f16};
  for (DType ac : {DType::bf16, DType::f16})
    for (const OpCase& c : op_cases()) {
      // Each input in each of the three types (3^n combinations, n <= 3).
      const size_t n = c.shapes.size();
      size_t combos = 1;
      for (size_t i = 0; i < n; ++i) combos *= 3;
      for (size_t m = 0; m < combos; ++m) {
        std::vector<DType> d(n);
        for (size_t i = 0, r = m; i < n; ++i, r /= 3) d[i] = all[r % 3];
        check_case(c, d, ac);
      }
    }
}

TEST(Autocast, OutsideAnyRegionNothingIsCast) {
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_depth(), 0);
  Var a(rnd({2, 3}, DType::bf16, 1), true), b(rnd({2, 3}, DType::f32, 2), true);
  EXPECT_EQ(add(a, b).dtype(), DType::bf16);  // the existing rule: a's dtype
  Var x(rnd({3, 4}, DType::f32, 3)), w(rnd({5, 4}, DType::f32, 4), true);
  EXPECT_EQ(linear(x, w, Var()).dtype(), DType::f32);
}

TEST(Autocast, EnteringARegionRoutesTheOpsThroughAutocast) {
  // autograd calls no amp code: the first region installs autocast as autograd's cast hook.
  set_cast_hook(nullptr);
  {
    AutocastScope on(true, DType::bf16);
    ASSERT_NE(cast_hook(), nullptr);
    EXPECT_TRUE(cast_hook()->active());
    EXPECT_EQ(cast_hook()->compute_dtype(), DType::bf16);
    Var x(rnd({3, 4}, DType::f32, 3)), w(rnd({5, 4}, DType::f32, 4), true);
    EXPECT_EQ(linear(x, w, Var()).dtype(), DType::bf16);
  }
  ASSERT_NE(cast_hook(), nullptr);  // stays installed, inactive outside any region
  EXPECT_FALSE(cast_hook()->active());
  EXPECT_EQ(cast_hook()->compute_dtype(), DType::f32);
}

TEST(Autocast, GemmRunsOnRoundedInputsAndGradientsComeBackInTheInputsDtype) {
  Var x(rnd({3, 4}, DType::f32, 5), true), w(rnd({5, 4}, DType::f32, 6), true),
      b(rnd({5}, DType::f32, 7), true);
  Var y;
  {
    AutocastScope ac(true, DType::bf16);
    y = linear(x, w, b);
  }
  // The same GEMM on explicitly rounded operands, no autocast: bit-identical.
  Var ref =
      linear(Var(x.value().to(DType::bf16)), Var(w.value().to(DType::bf16)), Var(b.value().to(DType::bf16)));
  ASSERT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.value().to_floats(), ref.value().to_floats());
  Var loss = cross_entropy(y, Tensor::from_ints({0, 1, 4}, {3}));
  loss.backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
}

// Promote ops read both storages in the kernel: no widened copy is made or recorded, and the
// values and gradients are those of the explicit cast (widening is exact; the gradient of the
// 16-bit input is rounded to 16 bits once, as the cast's backward would).
TEST(Autocast, PromoteOpsWidenInsideTheKernelWithTheCastsNumbers) {
  for (bool use_mul : {false, true}) {
    Var a(rnd({5, 7}, DType::f32, 1), true), b(rnd({5, 7}, DType::bf16, 2), true);
    Var out;
    {
      AutocastScope scope(true, DType::bf16);
      out = use_mul ? mul(a, b) : add(a, b);
    }
    EXPECT_EQ(out.dtype(), DType::f32);
    ASSERT_NE(out.impl()->grad_fn, nullptr);
    EXPECT_EQ(out.impl()->grad_fn->inputs[1], b.impl()) << "a cast node was recorded";
    Var a2(a.value(), true), b2(b.value(), true);
    Var ref = use_mul ? mul(a2, cast(b2, DType::f32)) : add(a2, cast(b2, DType::f32));
    EXPECT_EQ(out.value().to_doubles(), ref.value().to_doubles());
    const Tensor t = Tensor::from_ints({0, 1, 2, 3, 4}, {5});
    cross_entropy(out, t).backward();
    cross_entropy(ref, t).backward();
    EXPECT_EQ(b.grad().dtype(), DType::bf16);
    EXPECT_EQ(a.grad().to_doubles(), a2.grad().to_doubles());
    EXPECT_EQ(b.grad().to_doubles(), b2.grad().to_doubles());
  }
}

TEST(Autocast, F64IsNeverCast) {
  AutocastScope ac(true, DType::bf16);
  Var a(rnd({2, 3}, DType::f64, 1), true), b(rnd({3, 4}, DType::f64, 2), true);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f64);
  Var g(rnd({3}, DType::f64, 3), true), bb(rnd({3}, DType::f64, 4), true);
  EXPECT_EQ(layer_norm(a, g, bb, 1e-5f).dtype(), DType::f64);
  EXPECT_EQ(autocast_cache_stats().entries, 0);
}

TEST(Autocast, NestingSavesAndRestoresTheState) {
  Var x(rnd({2, 4}, DType::f32, 1)), w(rnd({3, 4}, DType::f32, 2), true);
  {
    AutocastScope outer(true, DType::bf16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::bf16);
    {
      AutocastScope inner(true, DType::f16, /*cache_enabled=*/false);
      EXPECT_EQ(autocast_depth(), 2);
      EXPECT_EQ(autocast_dtype(), DType::f16);
      EXPECT_FALSE(autocast_cache_enabled());
      EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::f16);
    }
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    EXPECT_TRUE(autocast_cache_enabled());
    EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::bf16);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_depth(), 0);
  EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::f32);
}

TEST(Autocast, DisabledInsideEnabledRunsInFp32AndCastsOuterActivationsUp) {
  Var x(rnd({2, 4}, DType::f32, 1)), w(rnd({3, 4}, DType::f32, 2), true),
      w2(rnd({5, 3}, DType::f32, 3), true);
  AutocastScope outer(true, DType::bf16);
  Var h = linear(x, w, Var());  // bf16 activation made in the enabled region
  ASSERT_EQ(h.dtype(), DType::bf16);
  {
    AutocastScope off(false);
    EXPECT_FALSE(autocast_enabled());
    EXPECT_EQ(linear(x, w, Var()).dtype(), DType::f32);  // f32 in, f32 out
    Var y = linear(h, w2, Var());                        // bf16 from outside: cast up
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(gelu(h).dtype(), DType::bf16);  // keep: the input's type
    EXPECT_EQ(add(h, Var(rnd({2, 3}, DType::f32, 4))).dtype(), DType::f32);
    {
      AutocastScope on_again(true, DType::f16);  // enabled inside disabled
      EXPECT_EQ(linear(x, w, Var()).dtype(), DType::f16);
    }
    EXPECT_EQ(linear(h, w2, Var()).dtype(), DType::f32);
    // Gradients still flow through the up-cast to the f32 leaf.
    cross_entropy(y, Tensor::from_ints({0, 4}, {2})).backward();
    EXPECT_EQ(w.grad().dtype(), DType::f32);
    EXPECT_EQ(w2.grad().dtype(), DType::f32);
  }
  EXPECT_TRUE(autocast_enabled());
  EXPECT_EQ(linear(x, w, Var()).dtype(), DType::bf16);
}

TEST(Autocast, TopLevelDisabledRegionChangesNothing) {
  AutocastScope off(false);
  Var a(rnd({2, 3}, DType::bf16, 1)), b(rnd({2, 3}, DType::f32, 2));
  EXPECT_EQ(add(a, b).dtype(), DType::bf16);
  EXPECT_EQ(gelu(a).dtype(), DType::bf16);
}

TEST(Autocast, AnExceptionUnwindsTheScopeAndClearsTheCache) {
  const int64_t before = live_bytes(MemCategory::cast_cache);
  Var w = Var::parameter(rnd({8, 4}, DType::f32, 1), Tensor::zeros({8, 4}, DType::f32));
  try {
    AutocastScope outer(true, DType::f16);
    AutocastScope inner(false);
    AutocastScope inner2(true, DType::bf16);
    Var y = linear(Var(rnd({2, 4}, DType::f32, 2)), w, Var());
    EXPECT_EQ(autocast_cache_stats().entries, 1);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(), DType::bf16);
  EXPECT_EQ(autocast_depth(), 0);
  EXPECT_EQ(autocast_cache_stats().entries, 0);
  EXPECT_EQ(live_bytes(MemCategory::cast_cache), before);
}

TEST(Autocast, RejectsNon16BitDtypesWithoutChangingState) {
  EXPECT_THROW(AutocastScope(true, DType::f32), ArgumentError);
  EXPECT_THROW(AutocastScope(true, DType::f8_e4m3), ArgumentError);
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_depth(), 0);
}

TEST(Autocast, StateIsThreadLocal) {
  AutocastScope ac(true, DType::bf16);
  Var x(rnd({2, 4}, DType::f32, 1)), w(rnd({3, 4}, DType::f32, 2), true);
  bool other_enabled = true;
  int other_depth = -1;
  DType other_out = DType::i32;
  std::thread t([&] {
    other_enabled = autocast_enabled();
    other_depth = autocast_depth();
    other_out = matmul(x, w, false, true).dtype();
    AutocastScope mine(true, DType::f16);  // does not leak into the main thread
  });
  t.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_depth, 0);
  EXPECT_EQ(other_out, DType::f32);
  EXPECT_EQ(autocast_dtype(), DType::bf16);
  EXPECT_EQ(matmul(x, w, false, true).dtype(), DType::bf16);
}

TEST(Autocast, AParameterUsedTwiceIsCastOnceAndTheCacheIsClearedAtTheOutermostExit) {
  const int64_t before = live_bytes(MemCategory::cast_cache);
  const AutocastCacheStats s0 = autocast_cache_stats();
  Var w = Var::parameter(rnd({16, 8}, DType::f32, 1), Tensor::zeros({16, 8}, DType::f32));
  Var x(rnd({4, 8}, DType::f32, 2));
  {
    AutocastScope outer(true, DType::bf16);
    {
      Var y1 = linear(x, w, Var());
      AutocastScope inner(true, DType::bf16);  // nested: same cache
      Var y2 = linear(x, w, Var());
      const AutocastCacheStats s = autocast_cache_stats();
      EXPECT_EQ(s.misses - s0.misses, 1);
      EXPECT_EQ(s.hits - s0.hits, 1);
      EXPECT_EQ(s.entries, 1);
      EXPECT_EQ(s.bytes, 16 * 8 * 2);
      EXPECT_EQ(live_bytes(MemCategory::cast_cache) - before, 16 * 8 * 2);
    }
    // The inner exit is not the outermost one: the entry survives.
    EXPECT_EQ(autocast_cache_stats().entries, 1);
    // Another dtype is another entry.
    {
      AutocastScope f16(true, DType::f16);
      Var y3 = linear(x, w, Var());
      EXPECT_EQ(autocast_cache_stats().entries, 2);
    }
  }
  EXPECT_EQ(autocast_cache_stats().entries, 0);
  EXPECT_EQ(autocast_cache_stats().bytes, 0);
  EXPECT_EQ(live_bytes(MemCategory::cast_cache), before);
}

TEST(Autocast, CacheDisabledOrActivationsAreNotCached) {
  Var w = Var::parameter(rnd({16, 8}, DType::f32, 1), Tensor::zeros({16, 8}, DType::f32));
  Var x(rnd({4, 8}, DType::f32, 2), true);  // a leaf, but made from an activation below
  {
    AutocastScope ac(true, DType::bf16, /*cache_enabled=*/false);
    Var y = linear(x, w, Var());
    EXPECT_EQ(autocast_cache_stats().entries, 0);
  }
  {
    AutocastScope ac(true, DType::bf16);
    Var h = scale(x, 2.f);  // a non-leaf f32 tensor
    Var y = linear(h, w, Var());
    EXPECT_EQ(autocast_cache_stats().entries, 1);  // only w (leaf x not used)
    Var w_nograd(rnd({16, 8}, DType::f32, 3));     // a leaf that does not require grad
    Var z = linear(h, w_nograd, Var());
    EXPECT_EQ(autocast_cache_stats().entries, 1);
  }
}

TEST(Autocast, CastsUnderNoGradAreNotCachedAndDoNotPoisonLaterUses) {
  // pytorch#112583: a no-grad forward inside the region cached a copy with no autograd link, and
  // a later forward with gradients reused it: the weight got no gradient.
  Tensor gbuf = Tensor::zeros({5, 4}, DType::f32);
  Var w = Var::parameter(rnd({5, 4}, DType::f32, 1), gbuf);
  Var x(rnd({3, 4}, DType::f32, 2));
  const Tensor tgt = Tensor::from_ints({0, 1, 4}, {3});
  AutocastScope ac(true, DType::bf16);
  {
    NoGradGuard ng;
    Var y = linear(x, w, Var());
    EXPECT_EQ(y.dtype(), DType::bf16);
    EXPECT_EQ(autocast_cache_stats().entries, 0);
  }
  Var loss = cross_entropy(linear(x, w, Var()), tgt);
  EXPECT_EQ(autocast_cache_stats().entries, 1);
  loss.backward();
  double norm = 0;
  for (float g : gbuf.to_floats()) norm += std::fabs(g);
  EXPECT_GT(norm, 0.0) << "the parameter got no gradient through the cached cast";
  // A no-grad lookup of the now-cached parameter may use the copy (values are current).
  const int64_t hits = autocast_cache_stats().hits;
  {
    NoGradGuard ng;
    Var y = linear(x, w, Var());
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_EQ(autocast_cache_stats().hits, hits + 1);
}

TEST(Autocast, AnInPlaceUpdateWithBumpedVersionIsRecast) {
  // The stale-cast trap: updating a weight in place inside one region must not leave the old
  // 16-bit copy in use.
  Tensor p = rnd({5, 4}, DType::f32, 1);
  Var w = Var::parameter(p, Tensor::zeros({5, 4}, DType::f32));
  Var x(rnd({3, 4}, DType::f32, 2));
  AutocastScope ac(true, DType::bf16);
  const AutocastCacheStats s0 = autocast_cache_stats();
  const std::vector<float> y_old = linear(x, w, Var()).value().to_floats();
  {
    NoGradGuard ng;  // an optimizer step: p -= 0.5, then the version bump
    p.copy_from(Tensor::from_floats(
        [&] {
          std::vector<float> v = p.to_floats();
          for (float& e : v) e -= 0.5f;
          return v;
        }(),
        p.shape(), DType::f32));
    p.storage()->bump_version();
  }
  const std::vector<float> y_new = linear(x, w, Var()).value().to_floats();
  EXPECT_EQ(autocast_cache_stats().misses - s0.misses, 2);
  EXPECT_EQ(autocast_cache_stats().entries, 1);  // the stale entry was replaced
  EXPECT_NE(y_new, y_old);
  // The result is the one a fresh cast of the new weights gives.
  Var ref = linear(Var(x.value().to(DType::bf16)), Var(p.to(DType::bf16)), Var());
  EXPECT_EQ(y_new, ref.value().to_floats());
}

TEST(Autocast, GradientsThroughTheCachedCastArriveInTheFp32Buffer) {
  Tensor gbuf = Tensor::zeros({6, 4}, DType::f32), gbuf_ref = Tensor::zeros({6, 4}, DType::f32);
  const Tensor pv = rnd({6, 4}, DType::f32, 1);
  Var w = Var::parameter(pv, gbuf);
  Var w_ref = Var::parameter(pv.clone(), gbuf_ref);
  Var x1(rnd({3, 4}, DType::f32, 2)), x2(rnd({3, 4}, DType::f32, 3));
  const Tensor tgt = Tensor::from_ints({0, 5, 2}, {3});
  {
    AutocastScope ac(true, DType::bf16);
    const AutocastCacheStats s0 = autocast_cache_stats();
    Var loss = cross_entropy(add(linear(x1, w, Var()), linear(x2, w, Var())), tgt);  // w used twice
    EXPECT_EQ(autocast_cache_stats().misses - s0.misses, 1);
    EXPECT_EQ(autocast_cache_stats().hits - s0.hits, 1);
    loss.backward();
  }
  // The same graph written out by hand without autocast: one explicit cast per use.
  {
    auto lin = [&](const Var& x) { return linear(cast(x, DType::bf16), cast(w_ref, DType::bf16), Var()); };
    Var sum = add(lin(x1), lin(x2));  // promote: bf16 + bf16 stays bf16
    cross_entropy(cast(sum, DType::f32), tgt).backward();
  }
  EXPECT_EQ(gbuf.dtype(), DType::f32);
  // The weight gradient of each use goes straight into the fp32 buffer (the GEMM accumulates
  // there, backward_rules.cpp grad_target), where the hand-written graph rounds each use's
  // gradient to bf16 first: equal up to that rounding, and not all bf16-representable.
  const std::vector<float> got = gbuf.to_floats(), ref = gbuf_ref.to_floats();
  // Each of the two rounded terms is off by up to 2^-9 of itself; terms can cancel, so the bound
  // scales with the largest gradient.
  float max_ref = 0;
  for (float r : ref) max_ref = std::max(max_ref, std::fabs(r));
  int not_bf16 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], ref[i], 4 * std::ldexp(max_ref, -9)) << i;
    if (f32_from_bf16(bf16_from_f32(got[i])) != got[i]) ++not_bf16;
  }
  EXPECT_GT(not_bf16, 0) << "the gradient was rounded to bf16 on its way";
  double norm = 0;
  for (float g : gbuf.to_floats()) norm += std::fabs(g);
  EXPECT_GT(norm, 0.0);
}

TEST(Autocast, TwoForwardBackwardPassesInOneRegionBothReachTheParameter) {
  // The cached copy is reused by the second forward after the first backward freed its graph;
  // its gradient must still reach the parameter (each use has its own cast node).
  Tensor gbuf = Tensor::zeros({5, 4}, DType::f32);
  Var w = Var::parameter(rnd({5, 4}, DType::f32, 1), gbuf);
  Var x(rnd({3, 4}, DType::f32, 2));
  const Tensor tgt = Tensor::from_ints({0, 1, 4}, {3});
  AutocastScope ac(true, DType::bf16);
  const int64_t hits = autocast_cache_stats().hits;
  cross_entropy(linear(x, w, Var()), tgt).backward();
  const std::vector<float> once = gbuf.to_floats();
  cross_entropy(linear(x, w, Var()), tgt).backward();
  EXPECT_EQ(autocast_cache_stats().hits, hits + 1);
  const std::vector<float> twice = gbuf.to_floats();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]) << i;
}
