// The flat-arena ops (kernels/optimizer_ops.h) in the op harness: adamw_update and sgd_update
// over every parameter/gradient pairing the optimizers use (fp32; fp32 masters with 16-bit
// gradients and a working copy; 16-bit parameters with nearest, stochastic and Kahan rounding),
// the fused unscale + non-finite check, and the global norm. Each fast path is documented
// bit-identical to its scalar reference for any thread count, so the tolerance is zero. The
// optimizers' own semantics (against PyTorch) are tests/optim/.
#include "kernels/optimizer_ops.h"

#include <cmath>
#include <limits>

#include "kernels/ops/op_harness.h"

namespace mixtrain::test {
namespace {

// flags: the update's storage pairing.
enum Mode { kF32 = 0, kMaster = 1, kLowpNearest = 2, kLowpStochastic = 3, kLowpKahan = 4 };

const char* mode_name(int m) {
  switch (m) {
    case kF32:
      return "f32";
    case kMaster:
      return "f32 master";
    case kLowpNearest:
      return "nearest";
    case kLowpStochastic:
      return "stochastic";
    default:
      return "kahan";
  }
}

// Spans over n elements: a decayed matrix, an undecayed bias, a decayed rest (a realistic arena).
std::vector<FlatSpan> spans_of(int64_t n) {
  if (n < 3) return {{0, n, true}};
  const int64_t a = n / 2, b = n / 7 + 1;
  return {{0, a, true}, {a, b, false}, {a + b, n - a - b, true}};
}

std::vector<OpConfig> update_configs() {
  std::vector<OpConfig> out;
  uint64_t seed = 1;
  for (int64_t n : {1, 37, 4099, 200003})
    for (auto [mode, dtype] : {std::pair{kF32, DType::f32}, std::pair{kMaster, DType::bf16},
                               std::pair{kMaster, DType::f16}, std::pair{kLowpNearest, DType::bf16},
                               std::pair{kLowpNearest, DType::f16}, std::pair{kLowpStochastic, DType::bf16},
                               std::pair{kLowpKahan, DType::bf16}, std::pair{kLowpKahan, DType::f16}}) {
      OpConfig c;
      c.sizes = {n};
      c.in = dtype;  // the gradients' (and 16-bit parameters') dtype
      c.out = mode == kF32 || mode == kMaster ? DType::f32 : dtype;
      c.flags = mode;
      c.seed = seed++;
      c.label =
          std::string(mode_name(mode)) + " " + std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
      out.push_back(c);
    }
  return out;
}

bool large(const OpConfig& cfg) { return cfg.sizes[0] >= 100000; }

// The update's tensors, made from cfg.seed: parameters, gradients, state, compensation, working copy.
struct UpdateTensors {
  Tensor p, g, s1, s2, c, working;
  LowpWrite w;
  WorkingCopyOut out() const {
    return working.defined() ? WorkingCopyOut{working.raw_data(), working.dtype(), 0} : WorkingCopyOut{};
  }
};
UpdateTensors update_tensors(const OpConfig& cfg, bool second_moment) {
  const int64_t n = cfg.sizes[0];
  const DType pt = cfg.out, st = cfg.out;
  UpdateTensors t;
  t.p = Tensor::rand_uniform({n}, pt, cfg.seed, -1.f, 1.f);
  t.g = Tensor::rand_uniform({n}, cfg.flags == kF32 ? DType::f32 : cfg.in, cfg.seed + 1, -0.1f, 0.1f);
  t.s1 = Tensor::rand_uniform({n}, st, cfg.seed + 2, -0.01f, 0.01f);
  if (second_moment) t.s2 = Tensor::rand_uniform({n}, st, cfg.seed + 3, 0.f, 1e-4f);
  if (cfg.flags == kLowpKahan) t.c = Tensor::rand_uniform({n}, st, cfg.seed + 4, -1e-3f, 1e-3f);
  if (cfg.flags == kMaster) t.working = Tensor::zeros({n}, cfg.in);
  t.w.rounding = cfg.flags == kLowpStochastic ? UpdateRounding::stochastic
                 : cfg.flags == kLowpKahan    ? UpdateRounding::kahan
                                              : UpdateRounding::nearest;
  t.w.seed = cfg.seed;
  t.w.counter_base = 11;
  return t;
}

std::vector<Tensor> outputs(const UpdateTensors& t) {
  std::vector<Tensor> o = {t.p, t.s1};
  for (const Tensor* x : {&t.s2, &t.c, &t.working})
    if (x->defined()) o.push_back(*x);
  return o;
}

struct AdamWUpdateTest : OpTest {
  std::string name() const override { return "adamw_update"; }
  std::vector<OpConfig> configs() const override { return update_configs(); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    UpdateTensors t = update_tensors(cfg, true);
    const AdamWScalars s{1.f - 1e-3f * 0.1f,
                         0.1f,
                         0.999f,
                         0.001f,
                         std::sqrt(1.f - std::pow(0.999f, 3.f)),
                         1e-8f,
                         -1e-3f / (1.f - std::pow(0.9f, 3.f))};
    const std::vector<FlatSpan> spans = spans_of(cfg.sizes[0]);
    if (reference)
      ref::adamw_update(t.p, t.g, t.s1, t.s2, t.c, spans, s, t.w, t.out());
    else
      ops::adamw_update(Device::cpu(), t.p, t.g, t.s1, t.s2, t.c, spans, s, t.w, t.out());
    return outputs(t);
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return {0, 0}; }  // bit-identical
};

struct SgdUpdateTest : OpTest {
  std::string name() const override { return "sgd_update"; }
  std::vector<OpConfig> configs() const override {
    std::vector<OpConfig> c = update_configs();
    for (OpConfig& x : c)
      if (x.seed % 3 == 0) {  // every third: plain SGD (no momentum buffer), nesterov on others
        x.label += " no-momentum";
        x.sizes.push_back(0);
      }
    return c;
  }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    UpdateTensors t = update_tensors(cfg, false);
    const bool momentum = cfg.sizes.size() == 1;
    if (!momentum) t.s1 = Tensor();
    const SgdScalars s{-0.05f, 0.01f, momentum ? 0.9f : 0.f, 1.f, false, momentum && cfg.seed % 2 == 0};
    const std::vector<FlatSpan> spans = spans_of(cfg.sizes[0]);
    if (reference)
      ref::sgd_update(t.p, t.g, t.s1, t.c, spans, s, t.w, t.out());
    else
      ops::sgd_update(Device::cpu(), t.p, t.g, t.s1, t.c, spans, s, t.w, t.out());
    std::vector<Tensor> o = {t.p};
    for (const Tensor* x : {&t.s1, &t.c, &t.working})
      if (x->defined()) o.push_back(*x);
    return o;
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return {0, 0}; }
};

// A contiguous f32 gradient of n elements; flags & 1 puts an inf at n/3, flags & 2 a NaN at 2n/3.
Tensor gradient(const OpConfig& cfg) {
  const int64_t n = cfg.sizes[0];
  Tensor g = Tensor::rand_uniform({n}, DType::f32, cfg.seed, -3e4f, 3e4f);
  if (n > 0 && (cfg.flags & 1)) g.data<float>()[n / 3] = std::numeric_limits<float>::infinity();
  if (n > 0 && (cfg.flags & 2)) g.data<float>()[2 * n / 3] = std::numeric_limits<float>::quiet_NaN();
  return g;
}

std::vector<OpConfig> gradient_configs(bool with_bad) {
  std::vector<OpConfig> out;
  uint64_t seed = 1;
  for (int64_t n : {0, 5, 4096, 4097, 70001, 300000})
    for (int bad : with_bad ? std::vector<int>{0, 1, 2} : std::vector<int>{0}) {
      OpConfig c;
      c.sizes = {n};
      c.flags = bad;
      c.seed = seed++;
      c.label = "n=" + std::to_string(n) + (bad == 1 ? " inf" : bad == 2 ? " nan" : "");
      out.push_back(c);
    }
  return out;
}

struct UnscaleAndCheckTest : OpTest {
  std::string name() const override { return "unscale_and_check"; }
  std::vector<OpConfig> configs() const override { return gradient_configs(true); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    std::vector<Tensor> out;
    for (float inv_scale : {1.f, 1.f / 65536.f, 3.f}) {  // 3: finite values pushed past fp32's range
      Tensor g = gradient(cfg);
      const UnscaleResult r = reference ? ref::unscale_and_check(g, inv_scale)
                                        : ops::unscale_and_check(Device::cpu(), g, inv_scale);
      out.push_back(g);
      out.push_back(Tensor::from_vector({r.found_inf ? 1.0 : 0.0}, {1}, DType::f64));
      if (!r.found_inf) out.push_back(Tensor::from_vector({r.sum_squares}, {1}, DType::f64));
    }
    return out;
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return {0, 0}; }
};

struct GlobalNormTest : OpTest {
  std::string name() const override { return "global_norm"; }
  std::vector<OpConfig> configs() const override { return gradient_configs(false); }
  std::vector<Tensor> run(const OpConfig& cfg, bool reference) const override {
    const Tensor g = gradient(cfg);
    const double norm = reference ? ref::global_norm(g) : ops::global_norm(Device::cpu(), g);
    return {Tensor::from_vector({norm}, {1}, DType::f64)};
  }
  Tolerance tolerance(const OpConfig&, size_t) const override { return {0, 0}; }
};

MIXTRAIN_REGISTER_OP_TEST_THREADS(AdamWUpdateTest, large);
MIXTRAIN_REGISTER_OP_TEST_THREADS(SgdUpdateTest, large);
MIXTRAIN_REGISTER_OP_TEST_THREADS(UnscaleAndCheckTest, [](const OpConfig& c) { return c.sizes[0] >= 70001; });
MIXTRAIN_REGISTER_OP_TEST_THREADS(GlobalNormTest, [](const OpConfig& c) { return c.sizes[0] >= 70001; });

}  // namespace
}  // namespace mixtrain::test
