// The meta backend (tensor/device.h): every op of the Backend interface for meta tensors. It
// computes nothing; it allocates exactly the temporaries the CPU backend's kernel for the same
// arguments allocates (tracked tensors only: the CPU kernels' std::vector rows are not tensor
// memory), in the same order and with the same lifetimes, so a training step run on meta charges
// the meta tracker what the same step charges the CPU's. Each method names the CPU code it
// mirrors; the GEMM asks the CPU GEMM's own planner (gemm_onednn.cpp) for its scratch buffers.
// The memory-prediction tests (tests/train/memory_prediction_test.cpp) hold the two to the byte.
#pragma once
#include "kernels/backend.h"

namespace mixtrain {

class MetaBackend final : public Backend {
 public:
  static MetaBackend& instance();
  Device device() const override { return Device::meta(); }
  std::string name() const override { return "meta"; }

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

  void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                    const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                    const WorkingCopyOut& working) override;
  void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                  const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working) override;
  // A meta gradient holds no values: finite, zero norm (so a meta run never skips a step).
  UnscaleResult unscale_and_check(Tensor& g, float inv_scale) override;
  double global_norm(const Tensor& g) override;

  void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads) override;
  void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out) override;
};

}  // namespace mixtrain
