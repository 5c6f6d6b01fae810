// Optimizer state below fp32 (`--optim-state bf16|int8`, kernels/state_kernels.h): bitsandbytes'
// dynamic maps, the code search against the definition on every threshold, the update kernels
// (fast against reference bit for bit, any thread count), an independent implementation of the
// published 8-bit blockwise AdamW against the optimizer, the fp32 fallback of small tensors, the
// bytes, checkpoint restore and its refusal of another precision.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/state_kernels.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/optim/sgd.h"
#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

TEST(DynamicMap, HasBitsandbytesShape) {
  for (bool sgn : {true, false}) {
    const DynamicMap& m = dynamic_map(sgn);
    for (size_t i = 0; i + 1 < 256; ++i) ASSERT_LT(m.value[i], m.value[i + 1]) << i;
    EXPECT_EQ(m.value[255], 1.f);
    EXPECT_EQ(m.value[m.zero_code], 0.f);
    // The smallest magnitude: 10^-6 times the first mean of linspace(0.1, 1, 2) (signed) or of
    // linspace(0.1, 1, 3) (unsigned: twice the values per decade).
    const float first = sgn ? (0.1f + 1.0f) / 2.0f : (0.1f + (0.1f + 0.9f / 2.0f)) / 2.0f;
    EXPECT_EQ(m.value[size_t(m.zero_code) + 1], float(1e-6) * first);
    // Per decade 10^(i-6): 2^i values signed (each sign), 2^(i+1) unsigned.
    for (int i = 0; i < 7; ++i) {
      const float lo = i == 0 ? 0.f : float(std::pow(10.0, i - 7)), hi = float(std::pow(10.0, i - 6));
      int n = 0;
      for (float v : m.value) n += v > lo && v < hi;
      EXPECT_EQ(n, sgn ? 1 << i : 1 << (i + 1)) << "signed " << sgn << " decade " << i;
    }
  }
  EXPECT_EQ(dynamic_map(true).zero_code, 127);
  EXPECT_EQ(dynamic_map(false).zero_code, 0);
  EXPECT_EQ(dynamic_map(false).value[0], 0.f);
  EXPECT_EQ(dynamic_map(true).value[0], -dynamic_map(true).value[254]);  // no -1: the map is not symmetric
}

// The code is the nearest value (exact arithmetic, ties to the smaller code), and the fast search
// gives the reference's code on both sides of every threshold and across every bucket of the
// float's top 16 bits.
TEST(DynamicMap, CodeIsNearestAndFastSearchAgrees) {
  for (bool sgn : {true, false}) {
    const DynamicMap& m = dynamic_map(sgn);
    auto check = [&](float s) {
      const uint8_t r = dynamic_code_ref(m, s);
      ASSERT_EQ(dynamic_code(sgn, s), r) << "s " << s << " signed " << sgn;
    };
    for (size_t i = 0; i < 255; ++i) {
      const float b = m.below[i];
      for (float s : {b, std::nextafter(b, 2.f), std::nextafter(b, -2.f), m.value[i], m.value[i + 1]})
        check(s);
      EXPECT_EQ(dynamic_code_ref(m, std::nextafter(b, 2.f)), i + 1);
      EXPECT_EQ(dynamic_code_ref(m, b), i);
    }
    for (uint32_t k = 0; k < 65536; ++k)
      for (uint32_t low : {0u, 1u, 0x7fffu, 0x8000u, 0xabcdu, 0xffffu}) {
        const float s = std::bit_cast<float>((k << 16) | low);
        if (!(std::fabs(s) <= 1.f)) continue;  // codes are of clamped values
        check(s);
      }
    EXPECT_EQ(dynamic_code(sgn, std::numeric_limits<float>::quiet_NaN()), 0);
    // nearest: no map value is closer than the code's
    for (int j = 0; j <= 2000; ++j) {
      const float s = sgn ? -1.f + float(j) / 1000.f : float(j) / 2000.f;
      const uint8_t c = dynamic_code_ref(m, s);
      const double d = std::fabs(double(s) - double(m.value[c]));
      for (float v : m.value) ASSERT_LE(d, std::fabs(double(s) - double(v))) << s;
    }
  }
}

OptimizerConfig config(OptimizerKind kind, StatePrecision state) {
  OptimizerConfig c;
  c.kind = kind;
  c.state = state;
  c.seed = 11;
  if (kind == OptimizerKind::sgd) {
    c.momentum = 0.9f;
    c.weight_decay = 1e-2f;
  }
  return c;
}

// Three steps of a fresh optimizer on a fresh big_store; the store and the optimizer's state.
struct Trial {
  ParameterStore store;
  OptimizerState state;
  std::vector<unsigned char> params, working;
  int64_t bytes = 0;
};
Trial run(const OptimizerConfig& c, bool reference, int threads, int steps = 3) {
  Trial r{big_store(DType::f32, DType::f32), {}, {}, {}, 0};
  fill_params(r.store);
  auto opt = make_optimizer(r.store, c);
  Tensor w = Tensor::zeros({r.store.flat_numel()}, DType::bf16);
  set_force_reference(reference);
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  for (int64_t k = 1; k <= steps; ++k) {
    fill_grads(r.store, k);
    opt->step(r.store, 1e-2f, &w);
  }
  omp_set_num_threads(before);
  set_force_reference(false);
  r.state = opt->state();
  r.params = raw_bytes(r.store.flat_params());
  r.working = raw_bytes(w);
  r.bytes = opt->state_bytes();
  return r;
}

struct StateCase {
  OptimizerKind kind;
  StatePrecision state;
};
class LowBitState : public ::testing::TestWithParam<StateCase> {};

TEST_P(LowBitState, FastIsReferenceBitForBitAtAnyThreadCount) {
  const OptimizerConfig c = config(GetParam().kind, GetParam().state);
  const Trial ref = run(c, true, 1), one = run(c, false, 1), two = run(c, false, 2);
  for (const Trial* r : {&one, &two}) {
    EXPECT_EQ(r->params, ref.params);
    EXPECT_EQ(r->working, ref.working);
    const OptimizerState& s = r->state;
    for (auto [a, b] :
         {std::pair{&s.exp_avg, &ref.state.exp_avg}, std::pair{&s.exp_avg_sq, &ref.state.exp_avg_sq},
          std::pair{&s.momentum_buffer, &ref.state.momentum_buffer},
          std::pair{&s.exp_avg_q.absmax, &ref.state.exp_avg_q.absmax},
          std::pair{&s.exp_avg_sq_q.absmax, &ref.state.exp_avg_sq_q.absmax},
          std::pair{&s.momentum_q.fallback, &ref.state.momentum_q.fallback}})
      EXPECT_EQ(raw_bytes(*a), raw_bytes(*b));
  }
}

// Close to the fp32 state's trajectory (3 steps; Adam's first steps are sign-like, so the
// parameters move alike), and the small tensors' fp32 fallback (int8) bit for bit the fp32 run's.
TEST_P(LowBitState, FollowsTheFp32Trajectory) {
  const OptimizerConfig c = config(GetParam().kind, GetParam().state);
  const Trial low = run(c, false, 2), full = run(config(GetParam().kind, StatePrecision::fp32), false, 2);
  const ParameterStore fresh = [] {
    ParameterStore s = big_store(DType::f32, DType::f32);
    fill_params(s);
    return s;
  }();
  const float* p0 = fresh.flat_params().data<float>();
  const float* a = reinterpret_cast<const float*>(low.params.data());
  const float* b = reinterpret_cast<const float*>(full.params.data());
  double moved = 0, diff = 0;
  for (const ParamInfo& info : fresh.infos()) {
    const bool small = info.numel < kInt8StateMinNumel;
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i) {
      if (small && c.state == StatePrecision::int8) {
        ASSERT_EQ(a[i], b[i]) << info.name << " element " << i;
      }
      moved += std::fabs(double(b[i]) - p0[i]);
      diff += std::fabs(double(a[i]) - b[i]);
    }
  }
  EXPECT_GT(moved, 0.0);
  EXPECT_LT(diff, 0.02 * moved) << "relative departure from the fp32 state's updates";
}

INSTANTIATE_TEST_SUITE_P(Optim, LowBitState,
                         ::testing::Values(StateCase{OptimizerKind::adamw, StatePrecision::bf16},
                                           StateCase{OptimizerKind::adamw, StatePrecision::int8},
                                           StateCase{OptimizerKind::sgd, StatePrecision::bf16},
                                           StateCase{OptimizerKind::sgd, StatePrecision::int8}),
                         [](const ::testing::TestParamInfo<StateCase>& i) {
                           return std::string(optimizer_kind_name(i.param.kind)) + "_" +
                                  std::string(state_precision_name(i.param.state));
                         });

// bitsandbytes' 8-bit blockwise Adam as published, written out for one quantized tensor
// (blocks of 256 on the arena's grid, cut at the tensor's ends): decode, torch's AdamW update in
// fp32, absmax, code = the nearest map value (exact distances; ties to the smaller code). The
// optimizer's codes, absmax and parameters match it bit for bit over three steps.
TEST(LowBitState, Int8AdamWIsThePublishedBlockwiseAlgorithm) {
  const OptimizerConfig c = config(OptimizerKind::adamw, StatePrecision::int8);
  const Trial r = run(c, false, 2);
  ParameterStore s = big_store(DType::f32, DType::f32);
  fill_params(s);
  const ParamInfo w = s.infos()[0];  // "w" (67, 301), decayed: quantized
  ASSERT_GE(w.numel, kInt8StateMinNumel);
  const DynamicMap &ms = dynamic_map(true), &mu = dynamic_map(false);
  std::vector<float> p(size_t(w.numel));
  for (int64_t i = 0; i < w.numel; ++i) p[size_t(i)] = s.flat_params().data<float>()[w.offset + i];
  std::vector<uint8_t> cm(size_t(w.numel), 0), cv(size_t(w.numel), 0);  // zeroed codes, zero absmax
  std::vector<float> am, av;
  auto nearest = [](const DynamicMap& map, float x) {
    int best = 0;
    for (int k = 1; k < 256; ++k)
      if (std::fabs(double(x) - map.value[size_t(k)]) < std::fabs(double(x) - map.value[size_t(best)]))
        best = k;
    return uint8_t(best);
  };
  auto encode = [&](const DynamicMap& map, const std::vector<float>& x, uint8_t* codes, float& absmax) {
    absmax = 0.f;
    for (float y : x) absmax = std::max(absmax, std::fabs(y));
    for (size_t i = 0; i < x.size(); ++i)
      codes[i] = absmax == 0.f ? map.zero_code : nearest(map, std::clamp(x[i] * (1.f / absmax), -1.f, 1.f));
  };
  AdamWConfig ac;
  ac.beta1 = c.beta1, ac.beta2 = c.beta2, ac.eps = c.eps, ac.weight_decay = c.weight_decay;
  for (int64_t step = 1; step <= 3; ++step) {
    fill_grads(s, step);
    const AdamWScalars k = adamw_scalars(ac, 1e-2f, step);
    std::vector<float> am_new, av_new;
    for (int64_t lo = 0; lo < w.numel;) {
      const int64_t hi = std::min(w.numel, ((w.offset + lo) / 256 + 1) * 256 - w.offset);
      const size_t blk = am_new.size();
      std::vector<float> mf, vf;
      for (int64_t i = lo; i < hi; ++i) {
        const size_t j = size_t(i);
        const float g = s.flat_grads().data<float>()[w.offset + i];
        float m = ms.value[cm[j]] * (am.empty() ? 0.f : am[blk]);
        float v = mu.value[cv[j]] * (av.empty() ? 0.f : av[blk]);
        // torch.optim.AdamW, fp32: decoupled decay, lerp (weight 0.1 < 0.5), addcmul, addcdiv
        const float pp = p[j] * k.decay_factor;
        m = m + k.beta1_weight * (g - m);
        v = v * k.beta2 + (k.one_minus_beta2 * g) * g;
        p[j] = pp + (k.neg_step_size * m) / (std::sqrt(v) / k.bc2_sqrt + k.eps);
        mf.push_back(m), vf.push_back(v);
      }
      am_new.push_back(0.f), av_new.push_back(0.f);
      encode(ms, mf, cm.data() + lo, am_new[blk]);
      encode(mu, vf, cv.data() + lo, av_new[blk]);
      lo = hi;
    }
    am = am_new, av = av_new;
  }
  const float* got = reinterpret_cast<const float*>(r.params.data()) + w.offset;
  const auto* gm = static_cast<const uint8_t*>(r.state.exp_avg.raw_data()) + w.offset;
  const auto* gv = static_cast<const uint8_t*>(r.state.exp_avg_sq.raw_data()) + w.offset;
  for (int64_t i = 0; i < w.numel; ++i) {
    ASSERT_EQ(got[i], p[size_t(i)]) << "parameter " << i;
    ASSERT_EQ(gm[i], cm[size_t(i)]) << "m code " << i;
    ASSERT_EQ(gv[i], cv[size_t(i)]) << "v code " << i;
  }
  for (size_t b = 0; b < am.size(); ++b) {  // w is the first parameter: its blocks come first
    ASSERT_EQ(r.state.exp_avg_q.absmax.data<float>()[b], am[b]) << "block " << b;
    ASSERT_EQ(r.state.exp_avg_sq_q.absmax.data<float>()[b], av[b]) << "block " << b;
  }
}

// 2 bytes a quantized element, 8 per block (two absmax), 8 per fallback element; bf16 4 bytes.
TEST(LowBitState, StateBytesToTheByte) {
  ParameterStore s = big_store(DType::f32, DType::f32);
  int64_t q = 0, blocks = 0, small = 0;
  for (const ParamInfo& i : s.infos()) {
    if (i.numel >= kInt8StateMinNumel) {
      q += i.numel;
      blocks += grid_cells(i.offset, i.numel);
    } else {
      small += i.numel;
    }
  }
  const int64_t n = s.flat_numel();  // codes cover the arena's padding too, as m and v do
  EXPECT_EQ(make_optimizer(s, config(OptimizerKind::adamw, StatePrecision::int8))->state_bytes(),
            2 * n + 8 * blocks + 8 * small);
  EXPECT_EQ(make_optimizer(s, config(OptimizerKind::adamw, StatePrecision::bf16))->state_bytes(), 4 * n);
  EXPECT_EQ(make_optimizer(s, config(OptimizerKind::sgd, StatePrecision::int8))->state_bytes(),
            n + 4 * blocks + 4 * small);
  EXPECT_GT(q, 0);
}

// Saved state restored into a fresh optimizer continues exactly; another precision is refused.
TEST(LowBitState, RestoreContinuesExactlyAndRefusesAnotherPrecision) {
  for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd})
    for (StatePrecision st : {StatePrecision::bf16, StatePrecision::int8}) {
      const OptimizerConfig c = config(kind, st);
      const Trial straight = run(c, false, 2, 4);
      ParameterStore s = big_store(DType::f32, DType::f32);
      fill_params(s);
      OptimizerState saved;
      {
        auto a = make_optimizer(s, c);
        for (int64_t k = 1; k <= 2; ++k) {
          fill_grads(s, k);
          a->step(s, 1e-2f);
        }
        saved = a->state();
        for (Tensor* t : {&saved.exp_avg, &saved.exp_avg_sq, &saved.momentum_buffer, &saved.exp_avg_q.absmax,
                          &saved.exp_avg_q.fallback, &saved.exp_avg_sq_q.absmax, &saved.exp_avg_sq_q.fallback,
                          &saved.momentum_q.absmax, &saved.momentum_q.fallback})
          if (t->defined()) *t = t->clone();  // what a checkpoint holds: not the live buffers
      }
      auto b = make_optimizer(s, c);
      b->restore(saved);
      for (int64_t k = 3; k <= 4; ++k) {
        fill_grads(s, k);
        b->step(s, 1e-2f);
      }
      EXPECT_EQ(raw_bytes(s.flat_params()), straight.params) << state_precision_name(st);
      auto other = make_optimizer(s, config(kind, StatePrecision::fp32));
      const std::string msg = expect_throw<ArgumentError>([&] { other->restore(saved); });
      EXPECT_NE(msg.find("--optim-state"), std::string::npos) << msg;
    }
}

// Master rounding (bf16 / fp16 parameters, fp32 masters in the optimizer) with bf16 / int8 moments:
// fast against reference bit for bit, and the same masters as an fp32 store with the same values.
TEST(LowBitState, MasterRoundingFastIsReferenceAndStepsAsFp32) {
  for (DType d : {DType::bf16, DType::f16})
    for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd})
      for (StatePrecision st : {StatePrecision::bf16, StatePrecision::int8}) {
        OptimizerConfig c = config(kind, st);
        c.rounding = UpdateRounding::master;
        std::vector<unsigned char> params[2], master[2], codes[2];
        for (int ref = 0; ref < 2; ++ref) {
          ParameterStore s = big_store(d, d);
          fill_params(s);
          auto opt = make_optimizer(s, c);
          set_force_reference(ref == 1);
          for (int64_t k = 1; k <= 3; ++k) {
            fill_grads(s, k);
            opt->step(s, 1e-2f);
          }
          set_force_reference(false);
          const OptimizerState os = opt->state();
          params[ref] = raw_bytes(s.flat_params());
          master[ref] = raw_bytes(os.master);
          codes[ref] = raw_bytes(kind == OptimizerKind::adamw ? os.exp_avg : os.momentum_buffer);
          ASSERT_TRUE(os.master.defined());
          // the 16-bit parameters are the masters rounded to nearest
          const float* mf = os.master.data<float>();
          for (const ParamInfo& info : s.infos())
            for (int64_t i = info.offset; i < info.offset + info.numel; ++i) {
              const float want = d == DType::bf16 ? f32_from_bf16(bf16_from_f32(mf[i]))
                                                  : f32_from_fp16(fp16_from_f32(mf[i]));
              ASSERT_EQ(get_flat(s.flat_params(), i), want) << info.name << " " << i;
            }
        }
        EXPECT_EQ(params[0], params[1]) << dtype_name(d) << " " << state_precision_name(st);
        EXPECT_EQ(master[0], master[1]);
        EXPECT_EQ(codes[0], codes[1]);
      }
}

TEST(LowBitState, NeedsFp32Parameters) {
  ParameterStore s = big_store(DType::bf16, DType::bf16);
  const std::string msg = expect_throw<ArgumentError>(
      [&] { make_optimizer(s, config(OptimizerKind::adamw, StatePrecision::int8)); });
  EXPECT_NE(msg.find("fp32 update"), std::string::npos) << msg;
  EXPECT_THROW(parse_state_precision("int4"), ArgumentError);
  EXPECT_EQ(parse_state_precision("bf16"), StatePrecision::bf16);
}

}  // namespace
}  // namespace mixtrain
