// The tensor ops. Each public function checks its arguments (shapes, dtypes, devices, data) and
// throws a typed error naming the op and the shapes, then runs the op's implementation for the
// tensors' device (CPU or meta). namespace ref holds the plain scalar reference of every op: the
// oracle the fast kernels are tested against (and what MIXTRAIN_FORCE_REFERENCE=1 runs).
//
// Dimension letters: M, N, K  GEMM sizes (out rows, out cols, inner); Bt batch of GEMMs;
//                    R rows (all leading dims flattened), C last-dim size (channels); V vocab.
// Precision placement: inputs may be f32, bf16 or f16 (some ops f64 for gradient checks); all
// arithmetic and every accumulation is in fp32 (f64 when the tensors are f64); outputs are
// rounded once to the output tensor's dtype. Outputs are written in full (never read) unless the
// op says otherwise (gemm with beta != 0).
#pragma once
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// ---- GEMM ----------------------------------------------------------------------------------
struct GemmOptions {
  bool trans_a = false;  // use a^T
  bool trans_b = false;  // use b^T
  float alpha = 1.f;
  float beta = 0.f;  // c = alpha * op(a) @ op(b) + beta * c
};
// a: (M, K) or (K, M) if trans_a; optionally batched (Bt, ., .)
// b: (K, N) or (N, K) if trans_b; batched (Bt, ., .) or 2-D and shared by every batch
// c: (M, N) or (Bt, M, N); dtype f32, bf16 or f16
// bias: optional (N) f32 row added to every output row (after alpha, before rounding)
// a and b must have the same dtype (f32, bf16 or f16). Each matrix must be contiguous in its last
// two dims up to a transpose (a transposed view is accepted); other layouts throw ShapeError.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt = {},
          const Tensor* bias = nullptr);
// Allocating form: returns op(a) @ op(b) in out_dtype.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out_dtype,
              MemCategory category = MemCategory::activations);

// ---- elementwise (fp32 math on any float storage; out may alias an input) --------------------
// b has the shape of a, or is a row (C) broadcast over a's leading dims (a: (..., C)).
void add(const Tensor& a, const Tensor& b, Tensor& out);
void mul(const Tensor& a, const Tensor& b, Tensor& out);
void scale(const Tensor& a, float s, Tensor& out);  // out = s * a
// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2 and torch's
// gelu(approximate='tanh').
void gelu(const Tensor& x, Tensor& out);
// The encoder's activations, one op with a kind (BERT's exact GELU, the pooler's tanh, a
// DistilBERT-style head's ReLU): gelu_erf 0.5 x (1 + erf(x / sqrt(2))) (torch's gelu(), BERT's
// "gelu"); tanh; relu max(x, 0) (NaN stays NaN, as torch.relu).
enum class Activation { gelu_erf, tanh, relu };
void activation(Activation kind, const Tensor& x, Tensor& out);

// ---- reductions (fp32 accumulation; f64 for f64 input) -----------------------------------------
enum class ReduceOp { sum, mean, max, sum_squares };
// Over every element; returns the fp32 result (as double only to carry f64 results exactly).
double reduce(const Tensor& x, ReduceOp op);
// Over the last dim: x (..., C) -> out (...) (out f32 or x's dtype).
void reduce_last(const Tensor& x, ReduceOp op, Tensor& out);
// Sum over every dim but the last: x (..., C) -> out (C). (Bias gradients.)
void sum_to_row(const Tensor& x, Tensor& out);
// Index of the largest element over the last dim: x (..., C) float, C >= 1 -> out (...) i32, as
// torch.argmax: the first index of the maximum, a NaN counting as the maximum. (Accuracy.)
void argmax_last(const Tensor& x, Tensor& out);

// ---- normalisation, softmax, embedding, loss -----------------------------------------------------
// Softmax along the last dim, max-subtracted, fp32 math: x (R, C) -> out (R, C).
void softmax_last(const Tensor& x, Tensor& out);
// Layer norm over the last dim: x (R, C); weight, bias (C) (any float dtype); out (R, C).
// mean and rstd (R) f32, optional, receive the statistics backward needs. Biased variance, as torch.
// xhat (R, C), optional, any float dtype: the normalised input (x - mean) * rstd, rounded once into
// its dtype (what backward can read instead of x, see layer_norm_backward), from the same pass.
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                Tensor* mean = nullptr, Tensor* rstd = nullptr, Tensor* xhat = nullptr);
// out[r, :] = weight[ids[r], :]: weight (V, C), ids (R) i32 (any shape, flattened), out (R, C).
// An id outside [0, V) throws ArgumentError naming the id and its position.
void embedding(const Tensor& weight, const Tensor& ids, Tensor& out);
// Cross-entropy from logits: logits (R, V), targets (R) i32 in [0, V) or -1 (ignored);
// losses (R) f32 optional (per-row loss, 0 for ignored rows). Returns the mean over non-ignored
// rows (0 if none), computed in fp32 with log-sum-exp.
double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses = nullptr);

namespace ref {
// The scalar references, same contracts (arguments already checked by the public functions,
// but safe to call directly with valid arguments). Plain loops, fp32 (f64 for f64) accumulation,
// arbitrary strides.
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
                Tensor* mean, Tensor* rstd, Tensor* xhat = nullptr);
void embedding(const Tensor& weight, const Tensor& ids, Tensor& out);
double cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses);
}  // namespace ref

}  // namespace mixtrain
