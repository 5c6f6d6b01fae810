// The CPU backend: fast kernels (oneDNN GEMM, OpenMP + SIMD elementwise/normalisation), each
// falling back to the scalar reference when force_reference() is on. The method bodies live in
// one file per op family (gemm_onednn.cpp, elementwise_cpu.cpp, ...).
#pragma once
#include "kernels/backend.h"

namespace mixtrain {

// What CpuBackend::gemm allocates for these arguments (its per-thread scratch buffers, grown and
// trimmed as a real call would), without computing: the meta backend's GEMM. The buffers are
// the meta device's own when the operands are meta tensors.
void gemm_workspace_only(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt,
                         const Tensor* bias);

class CpuBackend final : public Backend {
 public:
  static CpuBackend& instance();
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }

  void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void mul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& a, float s, Tensor& out) override;
  void gelu(const Tensor& x, Tensor& out) override;
  void activation(Activation kind, const Tensor& x, Tensor& out) override;
  double reduce(const Tensor& x, ReduceOp op) override;
  void reduce_last(const Tensor& x, ReduceOp op, Tensor& out) override;
  void sum_to_row(const Tensor& x, Tensor& out) override;
  void argmax_last(const Tensor& x, Tensor& out) override;
  void softmax_last(const Tensor& x, Tensor& out) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                  Tensor* mean, Tensor* rstd, Tensor* xhat) override;
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) override;

  // backward_cpu.cpp
  void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) override;
  void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx) override;
  void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y) override;
  void causal_softmax(const Tensor& x, float scale, Tensor& y) override;
  void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) override;
  void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                           const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss,
                              Tensor& dlogits) override;
  void sum_to_row_accumulate(const Tensor& x, Tensor& out) override;
  void add_inplace(Tensor& acc, const Tensor& x) override;

  // adamw_cpu.cpp, sgd_cpu.cpp
  void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                    const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                    const WorkingCopyOut& working) override;
  void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                  const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working) override;

  // gradient_cpu.cpp
  UnscaleResult unscale_and_check(Tensor& g, float inv_scale) override;
  double global_norm(const Tensor& g) override;

  // attention_cpu.cpp
  void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) override;
  void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) override;
};

}  // namespace mixtrain
