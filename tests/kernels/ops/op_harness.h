// The one op-test harness (after ggml's test-backend-ops): each op is a small struct that makes
// its inputs from a seed and runs either the public (fast) op or its scalar reference; the harness
// runs both over the struct's configurations and compares every output with a dtype-aware
// tolerance |fast - ref| <= atol + rtol * |ref|, printing the worst element and the share of the
// budget it used. Adding an op = one struct + one MIXTRAIN_REGISTER_OP_TEST line in its file
// (tests/kernels/ops/, one program: kernel_ops_test). The program's main (op_harness_main.cpp)
// makes one test per registered struct, OpHarness.<name>, one per struct registered with a thread
// filter, OpThreads.<name>, and OpRegistry.*, which fails for a library op (kernels/op.h) that
// lacks its reference, a backend's implementation or a struct here naming it.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/simd_forms.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::test {

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// Default budget for an output stored in `out` after math in fp32: the output's rounding
// (half an ulp of `out`, i.e. eps/2 relative) plus fp32 accumulation-order differences that grow
// with the reduction length (eps_f32 * sqrt(len), a random-walk bound with a factor 4 margin).
// atol covers results that cancel to ~0 (relative error is meaningless there); it is scaled by
// the typical magnitude `scale` of the terms being summed.
inline Tolerance default_tolerance(DType out, int64_t reduction_len = 1, double scale = 1.0) {
  const double eps_out = dtype_epsilon(out);
  const double eps32 = dtype_epsilon(DType::f32);
  const double acc = 4.0 * eps32 * std::sqrt(static_cast<double>(std::max<int64_t>(reduction_len, 1)));
  Tolerance t;
  t.rtol = (out == DType::f32 || out == DType::f64) ? acc + 4 * eps32 : eps_out + acc;
  // A value that rounds across a 16-bit ulp boundary differently because of accumulation order is
  // one full ulp away, hence eps_out (not eps_out/2) above.
  t.atol = t.rtol * scale;
  return t;
}

// The fast ops run their portable loops (kernels/cpu/simd_forms.h) while one of these lives with
// on = true: the form a CPU without AVX-512 runs, tested on CPUs that have it.
struct PortableForms {
  explicit PortableForms(bool on) { cpu::set_portable_forms_only(on); }
  ~PortableForms() { cpu::set_portable_forms_only(false); }
  PortableForms(const PortableForms&) = delete;
  PortableForms& operator=(const PortableForms&) = delete;
};

// Compares two tensors element by element (any dtypes, any strides; shapes must match).
inline ::testing::AssertionResult all_close(const Tensor& ref, const Tensor& fast, Tolerance tol,
                                            const std::string& what) {
  if (!(ref.shape() == fast.shape()))
    return ::testing::AssertionFailure() << what << ": shape mismatch ref " << ref.shape().to_string()
                                         << " fast " << fast.shape().to_string();
  const std::vector<double> r = ref.to_doubles();
  const std::vector<double> f = fast.to_doubles();
  double worst_ratio = 0;
  size_t worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const double budget = tol.atol + tol.rtol * std::fabs(r[i]);
    double ratio;
    if (std::isnan(r[i]) || std::isnan(f[i]))
      ratio = (std::isnan(r[i]) && std::isnan(f[i])) ? 0.0 : INFINITY;
    else if (std::isinf(r[i]) || std::isinf(f[i]))
      ratio = (r[i] == f[i]) ? 0.0 : INFINITY;
    else
      ratio = std::fabs(f[i] - r[i]) / (budget > 0 ? budget : 1e-300);
    if (ratio > 1.0) ++bad;
    if (ratio > worst_ratio || i == 0) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream msg;
  msg << what << ": " << r.size() << " elements, worst at " << worst;
  if (!r.empty()) msg << " ref=" << r[worst] << " fast=" << f[worst];
  msg << " used " << 100.0 * worst_ratio << "% of budget (atol=" << tol.atol << " rtol=" << tol.rtol << ")";
  if (bad) return ::testing::AssertionFailure() << msg.str() << "; " << bad << " elements over budget";
  if (std::getenv("MIXTRAIN_TEST_VERBOSE")) std::printf("  %s\n", msg.str().c_str());
  return ::testing::AssertionSuccess();
}

// One configuration of an op test: a name for messages plus free-form integer parameters
// (sizes) and dtypes that the op struct interprets.
struct OpConfig {
  std::string label;            // e.g. "bf16 M=17 N=33 K=5 transA"
  std::vector<int64_t> sizes;   // op-specific
  DType in = DType::f32;        // input dtype
  DType out = DType::f32;       // output dtype
  bool non_contiguous = false;  // make inputs as strided views (sliced / transposed)
  int flags = 0;                // op-specific
  uint64_t seed = 1;
};

// cfgs followed by a copy of each with `flag` set in its flags and " portable" in its label: for
// ops whose test runs the fast op under PortableForms when it sees the flag.
inline std::vector<OpConfig> with_portable_twins(std::vector<OpConfig> cfgs, int flag) {
  const size_t n = cfgs.size();
  for (size_t i = 0; i < n; ++i) {
    OpConfig p = cfgs[i];
    p.flags |= flag;
    p.label += " portable";
    cfgs.push_back(p);
  }
  return cfgs;
}

// Makes a seeded random input of `shape`; when non_contiguous, the returned tensor is a view
// with a gap of 3 elements after every row of the last dim (a slice of a wider tensor), so
// kernels must honour strides.
inline Tensor make_input(const Shape& shape, DType dtype, uint64_t seed, bool non_contiguous, float lo = -2.f,
                         float hi = 2.f) {
  if (!non_contiguous || shape.size() == 0) return Tensor::rand_uniform(shape, dtype, seed, lo, hi);
  Shape wide = shape;
  wide[wide.size() - 1] += 3;
  Tensor w = Tensor::rand_uniform(wide, dtype, seed, lo, hi);
  return w.slice(shape.size() - 1, 1, 1 + shape.back());
}

struct OpTest {
  virtual ~OpTest() = default;
  virtual std::string name() const = 0;
  // The library ops (kernels/op.h registry names) this struct checks: its name by default.
  virtual std::vector<std::string> ops() const { return {name()}; }
  virtual std::vector<OpConfig> configs() const = 0;
  // Builds the inputs from cfg (deterministically, from cfg.seed), runs the public op
  // (reference=false) or the ref:: function (reference=true), and returns every output.
  virtual std::vector<Tensor> run(const OpConfig& cfg, bool reference) const = 0;
  // Tolerance for output `index`; override with a comment when an op needs a wider one.
  virtual Tolerance tolerance(const OpConfig& cfg, size_t index) const {
    (void)index;
    return default_tolerance(cfg.out);
  }
};

// A registered struct; `threads` (when set) picks the configurations large enough to be split
// across threads at all, for the 1-vs-2-threads check.
struct RegisteredOpTest {
  std::unique_ptr<OpTest> test;
  std::function<bool(const OpConfig&)> threads;
};
inline std::vector<RegisteredOpTest>& op_registry() {
  static std::vector<RegisteredOpTest> r;
  return r;
}
struct OpRegistrar {
  explicit OpRegistrar(std::unique_ptr<OpTest> t, std::function<bool(const OpConfig&)> threads = {}) {
    op_registry().push_back({std::move(t), std::move(threads)});
  }
};
#define MIXTRAIN_OP_CAT2(a, b) a##b
#define MIXTRAIN_OP_CAT(a, b) MIXTRAIN_OP_CAT2(a, b)
#define MIXTRAIN_REGISTER_OP_TEST(Type) \
  static ::mixtrain::test::OpRegistrar MIXTRAIN_OP_CAT(op_registrar_, __LINE__)(std::make_unique<Type>())
// The same, and the fast path's outputs must be bit-identical with 1 and 2 threads on the
// configurations `filter` picks (the kernels split work independently of the thread count).
#define MIXTRAIN_REGISTER_OP_TEST_THREADS(Type, filter)                                                   \
  static ::mixtrain::test::OpRegistrar MIXTRAIN_OP_CAT(op_registrar_, __LINE__)(std::make_unique<Type>(), \
                                                                                filter)

// One struct over its configurations: fast vs reference.
inline void run_op_test(const OpTest& op) {
  const auto cfgs = op.configs();
  ASSERT_FALSE(cfgs.empty()) << op.name() << " has no configurations";
  for (const auto& cfg : cfgs) {
    SCOPED_TRACE(op.name() + " [" + cfg.label + "]");
    std::vector<Tensor> ref_out = op.run(cfg, true);
    std::vector<Tensor> fast_out = op.run(cfg, false);
    ASSERT_EQ(ref_out.size(), fast_out.size());
    for (size_t i = 0; i < ref_out.size(); ++i) {
      EXPECT_EQ(ref_out[i].dtype(), fast_out[i].dtype()) << "output " << i << " dtype";
      EXPECT_TRUE(all_close(ref_out[i], fast_out[i], op.tolerance(cfg, i),
                            op.name() + " [" + cfg.label + "] output " + std::to_string(i)));
    }
  }
}

// The fast path of one struct with 1 and with 2 threads: bit-identical outputs on the
// configurations its filter picks (at least one).
inline void run_thread_count_check(const RegisteredOpTest& entry) {
  const int saved = num_threads();
  int checked = 0;
  for (const OpConfig& cfg : entry.test->configs()) {
    if (!entry.threads(cfg)) continue;
    ++checked;
    SCOPED_TRACE(entry.test->name() + " [" + cfg.label + "]");
    set_num_threads(1);
    const std::vector<Tensor> one = entry.test->run(cfg, false);
    set_num_threads(2);
    const std::vector<Tensor> two = entry.test->run(cfg, false);
    ASSERT_EQ(one.size(), two.size());
    for (size_t i = 0; i < one.size(); ++i) {
      const Tensor a = one[i].contiguous(), b = two[i].contiguous();
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes())) << "output " << i;
    }
  }
  set_num_threads(saved);
  EXPECT_GT(checked, 0) << entry.test->name() << ": the thread filter picks no configuration";
}

}  // namespace mixtrain::test
