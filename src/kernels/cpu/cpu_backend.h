// The CPU backend: fast kernels (oneDNN GEMM, OpenMP + SIMD elementwise/normalisation), each
// falling back to the scalar reference when force_reference() is on. The method bodies live in
// one file per op family (gemm_onednn.cpp, elementwise_cpu.cpp, ...).
#pragma once
#include "mixtrain/kernels/backend.h"

namespace mixtrain {

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
  double reduce(const Tensor& x, ReduceOp op) override;
  void reduce_last(const Tensor& x, ReduceOp op, Tensor& out) override;
  void sum_to_row(const Tensor& x, Tensor& out) override;
  void softmax_last(const Tensor& x, Tensor& out) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                  Tensor* mean, Tensor* rstd) override;
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) override;
};

}  // namespace mixtrain
