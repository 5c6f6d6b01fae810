// The backward ops: the gradient of each differentiable forward op of kernels/ops.h that is not
// itself a forward op (the gradients of gemm, add, mul and scale are gemm, add, mul and scale), the
// causal attention softmax and its backward, and the two accumulation helpers gradients need.
// Same conventions as ops.h: the public functions check their arguments and throw typed errors
// naming the op and the shapes, then dispatch to the device's backend; namespace ref holds the
// scalar references (the oracle). f64 tensors are accepted everywhere (computed by the references
// in double) so finite-difference gradient checks can run through the public functions.
//
// Dimension letters: R rows (leading dims flattened), C last-dim size, V vocab,
//                    Tq, Tk attention query / key lengths.
// Precision: storage may be f32, bf16 or f16; math and accumulation are fp32 (f64 for f64
// tensors); each output is rounded once. "Accumulates" means out = round(out + fp32 sum): the
// current value of out is read, the new contribution summed in fp32 and added once.
// Determinism: every fast kernel gives bit-identical results for any thread count.
// Aliasing: an overwritten output (dx, dlogits, y) may be one of the same-shaped inputs itself
// (the identical view), never a partial overlap.
#pragma once
#include "mixtrain/kernels/ops.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// GELU (tanh form, as ops.h gelu) backward: dx = dout * gelu'(x).
// x, dout, dx: same shape, any float dtypes, any strides.
void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx);

// Backward of ops.h activation: dx = dout * f'(x) (tanh' from tanh(x) recomputed; relu' is 1 for
// x > 0, else 0). x, dout, dx: same shape, any float dtypes, any strides.
void activation_backward(Activation kind, const Tensor& x, const Tensor& dout, Tensor& dx);

// Bidirectional attention softmax with a key padding mask (BERT's extended attention mask):
// y = softmax over the last dim of scale * x, key column j of batch row b excluded (y exactly 0)
// where key_mask[b, j] == 0. x, y: (N, Tq, Tk) with N = B * H (batch row b owns the N / B
// consecutive heads b*H .. b*H+H-1); key_mask: (B, Tk) i32, 1 = real token, 0 = padding. A row
// whose keys are all masked attends uniformly to all Tk keys, as Hugging Face's finfo.min mask
// gives; so every row, padded queries included, is finite. The backward is softmax_last_backward
// times scale (y is 0 on masked keys, so their gradient is 0).
void masked_softmax(const Tensor& x, const Tensor& key_mask, float scale, Tensor& y);

// Causal attention softmax: y = softmax over the last dim of scale * x, where query row i may
// attend to key columns j <= i + (Tk - Tq) (the queries are the last Tq positions of the Tk keys,
// as with a KV cache); masked entries of y are exactly 0. Max-subtracted, fp32 math.
// x, y: (..., Tq, Tk) with Tq <= Tk (so every row attends to at least one key).
void causal_softmax(const Tensor& x, float scale, Tensor& y);
// dx = scale * y * (dy - sum_j dy_j y_j) over the unmasked j of each row; masked entries of dx are 0.
// y (the forward output), dy, dx: (..., Tq, Tk).
void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx);

// Softmax over the last dim (ops.h softmax_last) backward: dx = y * (dy - sum_j dy_j y_j).
// y (the forward output), dy, dx: (..., C).
void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

// Layer norm backward, with xhat = (x - mean) * rstd and g = dout * weight:
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))      (overwritten)
//   dweight += sum_r dout * xhat,  dbias += sum_r dout           (accumulated)
// x, dout, dx: (..., C) (R rows); weight, dweight, dbias: (C); mean, rstd: (R) or x's leading shape,
// f32 (or f64) as written by layer_norm forward. An undefined `mean` means x holds the normalized
// x-hat itself (any float dtype, e.g. saved in 16 bits by autocast): x-hat = x, and rstd still
// scales dx.
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias);

// Embedding backward: dweight[ids[r], :] += dout[r, :] (scatter-add; rows with the same id are summed
// in row order in fp32, then added once). ids: i32, any shape (R elements); dout: (R, C) or ids'
// shape followed by C; dweight: (V, C). An id outside [0, V) throws ArgumentError.
void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight);

// Cross-entropy backward, for loss = mean over the non-ignored rows (ops.h cross_entropy):
// dlogits = dloss * (softmax(logits) - onehot(target)) / n_valid; rows with target -1 are 0.
// logits, dlogits: (R, V) (dlogits f32, bf16 or f16; f64 with f64 logits); targets: (R) i32.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits);

// out (C) += the sum of x (..., C) over every dim but the last (bias gradients).
void sum_to_row_accumulate(const Tensor& x, Tensor& out);

// acc += x (same shape, any float dtypes, fp32 math): gradient accumulation.
void add_inplace(Tensor& acc, const Tensor& x);

namespace ref {
// The scalar references: same contracts, arguments assumed valid (ids and targets are still
// range-checked). Plain loops, arbitrary strides, fp32 (f64 for f64 tensors) with Kahan sums.
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
}  // namespace ref

}  // namespace mixtrain
