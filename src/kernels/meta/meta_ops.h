// The meta backend (tensor/device.h): every kernel op (kernels/op.h) for meta tensors. It
// computes nothing; it allocates exactly the temporaries the CPU backend's kernel for the same
// arguments allocates (tracked tensors only: the CPU kernels' std::vector rows are not tensor
// memory), in the same order and with the same lifetimes, so a training step run on meta charges
// the meta tracker what the same step charges the CPU's. Each function names the CPU code it
// mirrors; the GEMM asks the CPU GEMM's own planner (gemm_onednn.cpp) for its scratch buffers.
// The memory-prediction tests (tests/train/memory_prediction_test.cpp) hold the two to the byte.
#pragma once
#include <vector>

#include "kernels/gradient_kernels.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/kernels/quantize.h"

namespace mixtrain::meta {

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void mul(const Tensor& a, const Tensor& b, Tensor& out);
void scale(const Tensor& a, float s, Tensor& out);
void gelu(const Tensor& x, Tensor& out);
void activation(Activation kind, const Tensor& x, Tensor& out);
double reduce(const Tensor& x, ReduceOp op);
void reduce_last(const Tensor& x, ReduceOp op, Tensor& out);
void sum_to_row(const Tensor& x, Tensor& out);
void argmax_last(const Tensor& x, Tensor& out);
void softmax_last(const Tensor& x, Tensor& out);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                Tensor* mean, Tensor* rstd, Tensor* xhat);
void embedding(const Tensor& weight, const Tensor& ids, Tensor& out);
void fp8_quant_error(const Tensor& x, const Fp8Quant& how, const Tensor& q, const Tensor& scale_inv,
                     Fp8ErrorStats& s);
void fp8_quantize(const Tensor& x, const Fp8Quant& how, const Tensor* scale, Tensor& q, Tensor& scale_inv,
                  Tensor& amax);                                // quantize_meta.cpp
void quantize_rows(const Tensor& x, Tensor& q, Tensor& scale);  // quantize_meta.cpp
void dequantize_rows(const Tensor& q, const Tensor& scale, Tensor& out);
void embedding_dequantized(const Tensor& q, const Tensor& scale, const Tensor& ids, Tensor& out);
void gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc);
void dequantize_gemm(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale, const Tensor* bias,
                     Tensor& out);
void gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale, const Tensor& col_scale,
                         const Tensor* bias, Tensor& out, bool gelu_erf);
double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses);

void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx);
void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx);
void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y);
void causal_softmax(const Tensor& x, float scale, Tensor& y);
void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx);
void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias);
void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits);
void sum_to_row_accumulate(const Tensor& x, Tensor& out);
void add_inplace(Tensor& acc, const Tensor& x);

void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                  const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                  const WorkingCopyOut& working);
void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working);
// A meta gradient holds no values: finite, zero norm (so a meta run never skips a step).
UnscaleResult unscale_and_check(Tensor& g, float inv_scale);
double global_norm(const Tensor& g);

void heads_copy(const Tensor& rows, const std::vector<Tensor>& heads, int64_t H, bool to_heads);
void dropout_mask(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& out);
void masked_attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    float scale, float p, uint64_t seed, uint64_t offset, Tensor& y);
void masked_attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& key_mask, const Tensor& g, float scale, float p,
                                     uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv);
void attention_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& probs,
                             Tensor& y);
void attention_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& g, float scale, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace mixtrain::meta
