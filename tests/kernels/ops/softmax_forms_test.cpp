// The softmax rows' two forms (kernels/cpu/softmax_avx512.h against the portable loops of
// reduce_cpu.cpp and encoder_cpu.cpp): the same maxima, exponentials and blocked sums bit for bit
// (the AVX-512 exponential takes exp_f32's very steps), over row lengths around the 16 lanes, the
// 256-element sub-totals and the 4096-element blocks, with NaN, infinities and values past exp's
// overflow and underflow planted; and the masked softmax's output bit for bit in both forms. On a
// CPU without AVX-512 both runs take the portable loops and the test checks nothing new (said in
// its output).
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/softmax_avx512.h"
#include "kernels/ops/op_harness.h"
#include "kernels/ops_backward.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain::test {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SoftmaxForms, ExponentialsAndSumsEqualThePortableFormsBitForBit) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vl))
    std::printf("note: no AVX-512 here: both forms are the portable loops\n");
  for (const int64_t n : {1, 7, 15, 16, 17, 128, 255, 256, 257, 1000, 4096, 4097, 9000}) {
    const Tensor t = Tensor::rand_uniform({n}, DType::f32, static_cast<uint64_t>(n), -120.f, 120.f);
    std::vector<float> x = t.to_floats();
    if (n > 20) {
      x[3] = NAN;  // rows holding NaN, inf, -inf and the exponential's edges
      x[5] = INFINITY;
      x[6] = -INFINITY;
      x[8] = 88.72283935546875f;
      x[9] = 88.7228394f;
      x[10] = -87.3365478515625f;
      x[11] = -87.33655f;
      x[12] = -1e-45f;
    }
    float max_fast, max_port;  // the rows' maximum (NaN where a NaN is planted)
    {
      const PortableForms form(false);
      max_fast = cpu::max_f32(x.data(), n);
    }
    {
      const PortableForms form(true);
      max_port = cpu::max_f32(x.data(), n);
    }
    EXPECT_EQ(std::memcmp(&max_fast, &max_port, sizeof(float)), 0)
        << "max n=" << n << ": " << max_fast << " vs " << max_port;
    for (const float m : {0.f, 5.f, -30.f}) {
      std::vector<float> out_fast(static_cast<size_t>(n)), out_port(static_cast<size_t>(n));
      float sum_fast, sum_port;
      {
        const PortableForms form(false);
        sum_fast = cpu::exp_sub_sum_f32(x.data(), m, out_fast.data(), n);
      }
      {
        const PortableForms form(true);
        sum_port = cpu::exp_sub_sum_f32(x.data(), m, out_port.data(), n);
      }
      EXPECT_TRUE(same_bits(out_fast, out_port)) << "n=" << n << " m=" << m;
      EXPECT_EQ(std::memcmp(&sum_fast, &sum_port, sizeof(float)), 0)
          << "n=" << n << " m=" << m << ": " << sum_fast << " vs " << sum_port;
      for (int64_t i = 0; i < n; ++i) {  // and each is exp within its budget (NaN where x is)
        const double want =
            std::exp(static_cast<double>(x[i] - m));  // the fp32 difference, as the kernel forms it
        const float got = out_fast[static_cast<size_t>(i)];
        if (std::isnan(x[i])) {
          EXPECT_TRUE(std::isnan(got));
        } else if (want > 3.4028234663852886e38 || want < 1.1754943508222875e-38) {
          EXPECT_TRUE(got == (want > 1 ? INFINITY : 0.f) || std::fabs(got - want) <= 4e-7 * want)
              << "exp(" << x[i] << " - " << m << ") = " << got;
        } else {
          EXPECT_LE(std::fabs(got - want), 4e-7 * want) << "exp(" << x[i] << " - " << m << ")";
        }
      }
    }
  }
}

TEST(SoftmaxForms, MaskedSoftmaxEqualsThePortableFormBitForBit) {
  // (B*H, Tq, Tk) scores, two heads; batch rows with 0, 1, 17, 100 and all 130 real keys; a NaN
  // and an inf planted in rows with real keys.
  const int64_t B = 5, H = 2, Tq = 3, Tk = 130;
  Tensor x = Tensor::rand_uniform({B * H, Tq, Tk}, DType::f32, 7, -20.f, 20.f);
  std::vector<float> v = x.to_floats();
  v[static_cast<size_t>((2 * H * Tq) * Tk + 4)] = NAN;
  v[static_cast<size_t>((3 * H * Tq + 1) * Tk + 9)] = INFINITY;
  x = Tensor::from_floats(v, x.shape(), DType::f32);
  std::vector<int32_t> m;
  for (int len : {0, 1, 17, 100, 130})
    for (int64_t j = 0; j < Tk; ++j) m.push_back(j < len ? 1 : 0);
  const Tensor mask = Tensor::from_ints(m, {B, Tk});
  for (const DType out : {DType::f32, DType::bf16}) {
    Tensor yf = Tensor::empty(x.shape(), out), yp = Tensor::empty(x.shape(), out);
    {
      const PortableForms form(false);
      masked_softmax(x, mask, 0.3f, yf);
    }
    {
      const PortableForms form(true);
      masked_softmax(x, mask, 0.3f, yp);
    }
    EXPECT_EQ(std::memcmp(yf.raw_data(), yp.raw_data(), static_cast<size_t>(yf.numel()) * dtype_size(out)), 0)
        << dtype_name(out);
  }
}

}  // namespace
}  // namespace mixtrain::test
