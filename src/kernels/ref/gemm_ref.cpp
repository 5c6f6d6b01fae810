// The scalar GEMM reference: a plain triple loop over any strides, accumulating in fp32 (double
// when the tensors are f64) in k order, the output rounded once to c's dtype. The oracle that the
// oneDNN path (cpu/gemm_onednn.cpp) is checked against, and what MIXTRAIN_FORCE_REFERENCE=1 runs.
#include "kernels/ref/ref_util.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {

// c (Bt, M, N) = alpha * op(a) (Bt, M, K) @ op(b) (Bt, K, N) + beta * c + bias (N).
// A 2-D a or b is shared by every batch (its batch stride is 0).
template <typename T>
void gemm_loop(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias) {
  const bool batched = c.dim() == 3;
  const int64_t Bt = batched ? c.size(0) : 1;
  const int64_t M = c.size(-2), N = c.size(-1);
  const int64_t K = opt.trans_a ? a.size(-2) : a.size(-1);
  // Element strides of op(a) (M, K), op(b) (K, N) and c (M, N): a transpose swaps the last two.
  const int64_t a_b = a.dim() == 3 ? a.stride(0) : 0;
  const int64_t a_m = opt.trans_a ? a.stride(-1) : a.stride(-2);
  const int64_t a_k = opt.trans_a ? a.stride(-2) : a.stride(-1);
  const int64_t b_b = b.dim() == 3 ? b.stride(0) : 0;
  const int64_t b_k = opt.trans_b ? b.stride(-1) : b.stride(-2);
  const int64_t b_n = opt.trans_b ? b.stride(-2) : b.stride(-1);
  const int64_t c_b = batched ? c.stride(0) : 0;
  const int64_t c_m = c.stride(-2), c_n = c.stride(-1);
  const T alpha = static_cast<T>(opt.alpha), beta = static_cast<T>(opt.beta);

  for (int64_t bt = 0; bt < Bt; ++bt) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        T acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += detail::load<T>(a, bt * a_b + m * a_m + k * a_k) *
                 detail::load<T>(b, bt * b_b + k * b_k + n * b_n);
        const int64_t off = bt * c_b + m * c_m + n * c_n;
        T v = alpha * acc;
        // beta == 0: c is not read at all (it may hold garbage or NaN), as BLAS.
        if (opt.beta != 0.f) v += beta * detail::load<T>(c, off);
        if (bias) v += detail::load<T>(*bias, n * bias->stride(0));
        detail::store<T>(c, off, v);
      }
    }
  }
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias) {
  if (detail::any_f64({&a, &b, &c}))
    gemm_loop<double>(a, b, c, opt, bias);
  else
    gemm_loop<float>(a, b, c, opt, bias);
}

}  // namespace mixtrain::ref
