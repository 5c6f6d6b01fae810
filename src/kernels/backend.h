// The backend interface (internal: callers use kernels/ops.h): one object per device type implements every op
// for tensors on that device. Callers use kernels/ops.h, which validates and then dispatches here, so a CUDA
// backend can be added later without touching callers. The CPU backend runs the fast kernels, or the scalar
// references when force_reference() is on.
#pragma once
#include <string>

#include "kernels/gradient_kernels.h"
#include "kernels/ops_backward.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/kernels/threads.h"

namespace mixtrain {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  virtual void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt,
                    const Tensor* bias) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void mul(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void scale(const Tensor& a, float s, Tensor& out) = 0;
  virtual void gelu(const Tensor& x, Tensor& out) = 0;
  virtual void activation(Activation kind, const Tensor& x, Tensor& out) = 0;
  virtual double reduce(const Tensor& x, ReduceOp op) = 0;
  virtual void reduce_last(const Tensor& x, ReduceOp op, Tensor& out) = 0;
  virtual void sum_to_row(const Tensor& x, Tensor& out) = 0;
  virtual void argmax_last(const Tensor& x, Tensor& out) = 0;
  virtual void softmax_last(const Tensor& x, Tensor& out) = 0;
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                          Tensor* mean, Tensor* rstd, Tensor* xhat) = 0;
  virtual void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) = 0;
  virtual double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) = 0;

  // Backward ops and the causal softmax (kernels/ops_backward.h).
  virtual void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) = 0;
  virtual void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx) = 0;
  virtual void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y) = 0;
  virtual void causal_softmax(const Tensor& x, float scale, Tensor& y) = 0;
  virtual void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) = 0;
  virtual void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  virtual void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& dout, Tensor& dx, Tensor& dweight,
                                   Tensor& dbias) = 0;
  virtual void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight) = 0;
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss,
                                      Tensor& dlogits) = 0;
  virtual void sum_to_row_accumulate(const Tensor& x, Tensor& out) = 0;
  virtual void add_inplace(Tensor& acc, const Tensor& x) = 0;

  // Optimizer updates over a flat parameter arena (kernels/optimizer_kernels.h). p, g, the state
  // (m, v / buf) and c: (flat_numel) contiguous tensors of one dtype, f32, bf16 or f16; buf is
  // undefined when SGD has no momentum, c unless 16-bit kahan rounding; `w` applies to 16-bit
  // parameters, `working` (fp32 only) receives the 16-bit working copy.
  virtual void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                            const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                            const WorkingCopyOut& working) = 0;
  virtual void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c,
                          const std::vector<FlatSpan>& spans, const SgdScalars& s, const LowpWrite& w,
                          const WorkingCopyOut& working) = 0;

  // Flat contiguous f32 gradients (kernels/gradient_kernels.h): the fused unscale + non-finite
  // check + sum of squares, and the blocked global L2 norm.
  virtual UnscaleResult unscale_and_check(Tensor& g, float inv_scale) = 0;
  virtual double global_norm(const Tensor& g) = 0;

  // kernels/attention_ops.h (arguments checked by the public functions).
  virtual void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) = 0;
  virtual void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) = 0;
};

// The backend for a device; throws ArgumentError for a device this build has no backend for.
Backend& backend_for(Device device);

}  // namespace mixtrain
