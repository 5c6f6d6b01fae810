// SGD with momentum: against torch.optim.SGD's formulas in double (plain, momentum, nesterov,
// weight decay), the fast kernel against the reference, state restore and config errors.
#include "mixtrain/optim/sgd.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <random>

#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

// torch.optim.SGD (single-tensor path), in double:
//   d = g + wd*p;  buf = (first ? d : momentum*buf + (1-dampening)*d)
//   d = nesterov ? d + momentum*buf : buf;  p -= lr*d
void check_against_double(const SgdConfig& cfg, int steps) {
  ParameterStore s = small_store();
  fill_params(s);
  SGD opt(s, cfg);
  const int64_t n = s.flat_numel();
  // p_mag, buf_mag: the same recurrences over absolute values (error-analysis magnitudes: where
  // terms cancel, fp32 rounding errors are relative to these, not to the result).
  std::vector<double> p(size_t(n), 0.0), buf(size_t(n), 0.0), p_mag(size_t(n), 0.0), buf_mag(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (owner(s, i)) p[size_t(i)] = double(float(param_value(i))), p_mag[size_t(i)] = std::abs(p[size_t(i)]);
  for (int t = 1; t <= steps; ++t) {
    fill_grads(s, t);
    opt.step(s, cfg.lr);
    for (int64_t i = 0; i < n; ++i) {
      const ParamInfo* o = owner(s, i);
      if (!o) continue;
      const size_t u = size_t(i);
      double d = double(float(grad_value(i, t)));
      double d_mag = std::abs(d);
      if (o->weight_decay) d += double(cfg.weight_decay) * p[u], d_mag += double(cfg.weight_decay) * p_mag[u];
      if (cfg.momentum != 0) {
        buf[u] = t == 1 ? d : double(cfg.momentum) * buf[u] + (1 - double(cfg.dampening)) * d;
        buf_mag[u] = t == 1 ? d_mag : double(cfg.momentum) * buf_mag[u] + (1 - double(cfg.dampening)) * d_mag;
        d = cfg.nesterov ? d + double(cfg.momentum) * buf[u] : buf[u];
        d_mag = cfg.nesterov ? d_mag + double(cfg.momentum) * buf_mag[u] : buf_mag[u];
      }
      p[u] -= double(cfg.lr) * d;
      p_mag[u] += double(cfg.lr) * d_mag;
    }
    const float* pf = s.flat_params().data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (!owner(s, i)) {
        EXPECT_EQ(pf[i], 0.f);  // padding untouched
        continue;
      }
      EXPECT_NEAR(pf[i], p[size_t(i)], 8 * FLT_EPSILON * p_mag[size_t(i)] + 1e-12)
          << "step " << t << " elem " << i;
      if (cfg.momentum != 0) {
        EXPECT_NEAR(opt.momentum_buffer().data<float>()[i], buf[size_t(i)],
                    8 * FLT_EPSILON * buf_mag[size_t(i)] + 1e-12);
      }
    }
    EXPECT_EQ(opt.steps(), t);
  }
}

TEST(SGD, Plain) { check_against_double(SgdConfig{0.1f, 0.f, 0.f, 0.f, false}, 4); }
TEST(SGD, Momentum) { check_against_double(SgdConfig{0.1f, 0.9f, 0.f, 0.f, false}, 5); }
TEST(SGD, MomentumWeightDecay) { check_against_double(SgdConfig{0.1f, 0.9f, 0.f, 0.05f, false}, 5); }
TEST(SGD, Nesterov) { check_against_double(SgdConfig{0.05f, 0.8f, 0.f, 0.01f, true}, 5); }
TEST(SGD, Dampening) { check_against_double(SgdConfig{0.05f, 0.9f, 0.5f, 0.f, false}, 4); }

TEST(SGD, FirstStepBufferIsGradient) {
  ParameterStore s = small_store();
  SGD opt(s, SgdConfig{0.1f, 0.9f, 0.f, 0.f, false});
  fill_grads(s, 1);
  opt.step(s);
  EXPECT_EQ(opt.momentum_buffer().to_floats(), s.flat_grads().to_floats());
  SGD plain(s, SgdConfig{});
  EXPECT_FALSE(plain.momentum_buffer().defined());  // no buffer without momentum, as torch
}

TEST(SGD, FastBitIdenticalToReferenceAndThreadIndependent) {
  std::mt19937_64 rng(3);
  std::vector<FlatSpan> spans;
  int64_t off = 0;
  while (off < 2'000'000) {
    const int64_t len = 1 + int64_t(rng() % (rng() % 4 == 0 ? 50000 : 200));
    spans.push_back({off, len, rng() % 2 == 0});
    off += len + int64_t(rng() % 9);
  }
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> p0(static_cast<size_t>(off)), g(static_cast<size_t>(off));
  for (size_t i = 0; i < p0.size(); ++i) p0[i] = nd(rng), g[i] = nd(rng) * 0.01f;
  for (bool nesterov : {false, true}) {
    std::vector<float> pa = p0, pb = p0, pc = p0, ba(p0.size()), bb(p0.size()), bc(p0.size());
    SgdScalars s{-0.01f, 0.1f, 0.9f, 1.f, true, nesterov};
    const int saved = omp_get_max_threads();
    for (int t = 1; t <= 3; ++t) {
      s.first_step = t == 1;
      sgd_update_ref(pa.data(), g.data(), ba.data(), spans, s);
      omp_set_num_threads(2);
      sgd_update(pb.data(), g.data(), bb.data(), spans, s);
      omp_set_num_threads(1);
      sgd_update(pc.data(), g.data(), bc.data(), spans, s);
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(pa, pb);
    EXPECT_EQ(ba, bb);
    EXPECT_EQ(pb, pc);
    EXPECT_EQ(bb, bc);
  }
}

TEST(SGD, StateRestore) {
  const SgdConfig cfg{0.1f, 0.9f, 0.f, 0.01f, false};
  ParameterStore a = small_store();
  fill_params(a);
  SGD oa(a, cfg);
  fill_grads(a, 1);
  oa.step(a);
  ParameterStore b = small_store();
  Tensor(b.flat_params()).copy_from(a.flat_params());
  SGD ob(b, cfg);
  ob.set_state(oa.steps(), oa.momentum_buffer());
  fill_grads(a, 2);
  fill_grads(b, 2);
  oa.step(a);
  ob.step(b);
  EXPECT_EQ(a.flat_params().to_floats(), b.flat_params().to_floats());
  expect_throw<ShapeError>([&] { ob.set_state(1, Tensor()); });
}

TEST(SGD, BadConfigThrowsArgumentError) {
  ParameterStore s = small_store();
  expect_throw<ArgumentError>([&] { SGD o(s, SgdConfig{-0.1f, 0.f, 0.f, 0.f, false}); });
  expect_throw<ArgumentError>([&] { SGD o(s, SgdConfig{0.1f, -0.9f, 0.f, 0.f, false}); });
  expect_throw<ArgumentError>([&] { SGD o(s, SgdConfig{0.1f, 0.9f, 0.f, -1.f, false}); });
  const std::string msg = expect_throw<ArgumentError>([&] {
    SGD o(s, SgdConfig{0.1f, 0.f, 0.f, 0.f, true});
  });
  EXPECT_NE(msg.find("nesterov"), std::string::npos) << msg;
  expect_throw<ArgumentError>([&] { SGD o(s, SgdConfig{0.1f, 0.9f, 0.1f, 0.f, true}); });
  SGD o(s);
  expect_throw<ArgumentError>([&] { o.step(s, NAN); });
  ParameterStore half = small_store(DType::bf16);
  SGD o16(half);
  expect_throw<DTypeError>([&] { o16.step(half); });
}

}  // namespace
}  // namespace mixtrain
