// The backward rules: one entry per op, in one table (STYLE lesson 8). Each rule receives the
// gradient of the op's output and accumulates the gradient of each input that requires one.
// Gradients have the dtype of the value they belong to; parameter gradients accumulate straight
// into the parameter arena (GEMM with beta = 1, scatter-add, column sums) without temporaries.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "internal.h"
#include "kernels/op_checks.h"
#include "kernels/ops_backward.h"
#include "mixtrain/autograd/fp8_linear.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "tensor/alloc_site.h"

namespace mixtrain::autograd {
namespace {

// Where a weight gradient goes. For autocast's 16-bit copy of a parameter, the parameter itself:
// its fp32 buffer takes the GEMM (beta = 1) or the column sums directly, as Megatron-LM's
// gradient-accumulation fusion does, instead of a 16-bit gradient that the cast's backward would
// widen and add (one rounding to 16 bits, a conversion pass and an add pass fewer per weight).
VarImpl& grad_target(VarImpl& in) {
  if (in.param_cast && in.grad_fn && in.grad_fn->op == OpKind::cast && in.grad_fn->inputs.size() == 1) {
    VarImpl& p = *in.grad_fn->inputs[0];
    if (p.grad_is_buffer && p.requires_grad) return p;
  }
  return in;
}

// d(input) += op(a) @ op(b), straight into a gradient buffer when the input has one.
void grad_gemm(VarImpl& in_or_cast, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  VarImpl& in = grad_target(in_or_cast);
  if (!in.requires_grad) return;
  GemmOptions o;
  o.trans_a = ta;
  o.trans_b = tb;
  if (in.grad_is_buffer) {
    o.beta = 1.f;
    gemm(a, b, param_grad(in), o);
    return;
  }
  accumulate_grad(in, mixtrain::matmul(a, b, ta, tb, in.dtype, MemCategory::activations));
}

// d(input) += column sums of g, for a row (C) input broadcast over g (..., C).
void grad_row_sum(VarImpl& in_or_cast, const Tensor& g) {
  VarImpl& in = grad_target(in_or_cast);
  if (!in.requires_grad) return;
  if (in.grad_is_buffer) {
    sum_to_row_accumulate(g, param_grad(in));
    return;
  }
  Tensor s = Tensor::zeros(in.shape, in.dtype);
  sum_to_row_accumulate(g, s);
  accumulate_grad(in, s);
}

bool is_row_broadcast(const VarImpl& a, const VarImpl& b) { return !(a.shape == b.shape); }

void matmul_backward(Node& n, const Tensor& g) {
  VarImpl& A = *n.inputs[0];
  VarImpl& B = *n.inputs[1];
  const Tensor& a = n.in_values[0];
  const Tensor& b = n.in_values[1];
  const bool ta = n.b0, tb = n.b1;
  // C = op(A) op(B). The four cases of dA and dB, each one GEMM on the saved operands:
  if (!ta && !tb) {  // C = A B:       dA = dC B^T,     dB = A^T dC
    grad_gemm(A, g, b, false, true);
    grad_gemm(B, a, g, true, false);
  } else if (!ta && tb) {  // C = A B^T: dA = dC B,       dB = dC^T A
    grad_gemm(A, g, b, false, false);
    grad_gemm(B, g, a, true, false);
  } else if (ta && !tb) {  // C = A^T B: dA = B dC^T,     dB = A dC
    grad_gemm(A, b, g, false, true);
    grad_gemm(B, a, g, false, false);
  } else {  // C = A^T B^T:              dA = B^T dC^T,   dB = dC^T A^T
    grad_gemm(A, b, g, true, true);
    grad_gemm(B, g, a, true, true);
  }
}

void linear_backward(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  VarImpl& W = *n.inputs[1];
  VarImpl& Bi = *n.inputs[2];
  const Tensor x = W.requires_grad ? saved_input(n, 0) : Tensor();  // dW's operand only
  const Tensor& w = n.in_values[1];
  const int64_t in = w.size(1), out = w.size(0);
  const Tensor g2 = g.contiguous().reshape({-1, out});  // (R, OUT)
  if (X.requires_grad) {                                // dx = dy W       (R, IN)
    Tensor dx = Tensor::empty(X.shape, X.dtype);
    Tensor dx2 = dx.reshape({-1, in});
    gemm(g2, w, dx2);
    accumulate_grad(X, dx);
  }
  if (W.requires_grad) grad_gemm(W, g2, x.contiguous().reshape({-1, in}), true, false);  // dW = dy^T x
  grad_row_sum(Bi, g2);                                                                  // db = sum_rows dy
}

// The fp8 linear (autograd/fp8_linear.h): each GEMM quantizes its operands along its own summed
// dimension (the recipes' blocks lie along it), x and w again from the saved 16-bit values.
void fp8_linear_backward(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  VarImpl& W = *n.inputs[1];
  VarImpl& Bi = *n.inputs[2];
  Fp8Site& site = *n.fp8;
  const int64_t in = W.shape[1], out = W.shape[0];
  const Tensor g2 = g.contiguous().reshape({-1, out});  // (M, OUT)
  const auto saved = [&](size_t i) {                    // forward's quantization of x (0) or w (2)
    Fp8Operand o;
    o.q = n.saved[i];
    o.scale_inv = n.saved[i + 1];
    o.dequantized = site.recipe == Fp8Recipe::block;
    return o;
  };
  // A per-tensor recipe quantizes dy once for both GEMMs.
  const bool one_g = fp8_reuses_input(site.recipe);
  Fp8Operand gq;
  if (X.requires_grad) {  // dx = dy W: sums along OUT
    gq = fp8_operand(g2, site, Fp8Role::grad_output, true);
    const Fp8Operand wq =
        n.saved[2].defined() ? saved(2) : fp8_operand(n.in_values[1], site, Fp8Role::weight, false);
    Tensor dx = Tensor::empty(X.shape, X.dtype);
    Tensor dx2 = dx.reshape({-1, in});
    fp8_gemm(gq, wq, false, false, dx2, nullptr, false);
    accumulate_grad(X, dx);
  }
  VarImpl& Wt = grad_target(W);
  if (Wt.requires_grad) {  // dW = dy^T x: sums along the rows M
    const Fp8Operand gc = one_g && gq.q.defined() ? gq : fp8_operand(g2, site, Fp8Role::grad_output, false);
    const Fp8Operand xq = n.saved[0].defined() ? saved(0)
                                               : fp8_operand(n.in_values[0].contiguous().reshape({-1, in}),
                                                             site, Fp8Role::input, false);
    if (Wt.grad_is_buffer) {
      fp8_gemm(gc, xq, true, false, param_grad(Wt), nullptr, true);
    } else {
      Tensor dw = Tensor::empty({out, in}, Wt.dtype, MemCategory::activations);
      fp8_gemm(gc, xq, true, false, dw, nullptr, false);
      accumulate_grad(Wt, dw);
    }
  }
  grad_row_sum(Bi, g2);  // db = sum_rows dy, from the unquantized gradient
}

void add_backward(Node& n, const Tensor& g) {
  VarImpl& A = *n.inputs[0];
  VarImpl& B = *n.inputs[1];
  accumulate_grad(A, g);
  if (is_row_broadcast(A, B))
    grad_row_sum(B, g);
  else
    accumulate_grad(B, g);
}

void mul_backward(Node& n, const Tensor& g) {
  VarImpl& A = *n.inputs[0];
  VarImpl& B = *n.inputs[1];
  if (A.requires_grad) {  // da = g * b (b broadcast as in forward)
    Tensor da = Tensor::empty(A.shape, A.dtype);
    mul(g, n.in_values[1], da);
    accumulate_grad(A, da);
  }
  if (B.requires_grad) {  // db = g * a, summed over the broadcast rows
    Tensor ga = Tensor::empty(A.shape, is_row_broadcast(A, B) ? DType::f32 : B.dtype);
    mul(g, n.in_values[0], ga);
    if (is_row_broadcast(A, B))
      grad_row_sum(B, ga);
    else
      accumulate_grad(B, ga);
  }
}

void scale_backward(Node& n, const Tensor& g) {
  VarImpl& A = *n.inputs[0];
  Tensor da = Tensor::empty(A.shape, A.dtype);
  scale(g, static_cast<float>(n.f), da);
  accumulate_grad(A, da);
}

void gelu_backward_rule(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  Tensor dx = Tensor::empty(X.shape, X.dtype);
  gelu_backward(n.in_values[0], g, dx);
  accumulate_grad(X, dx);
}

// gelu_erf, tanh, relu: the activation kernel's backward from the saved input.
Activation activation_of(OpKind op) {
  return op == OpKind::gelu_erf ? Activation::gelu_erf
         : op == OpKind::tanh   ? Activation::tanh
                                : Activation::relu;
}
void activation_backward_rule(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  Tensor dx = Tensor::empty(X.shape, X.dtype);
  activation_backward(activation_of(n.op), n.in_values[0], g, dx);
  accumulate_grad(X, dx);
}

void layer_norm_backward_rule(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  VarImpl& W = *n.inputs[1];
  VarImpl& Bi = *n.inputs[2];
  const Tensor& x = n.in_values[0];  // x, or x-hat when n.b0 (saved in 16 bits under autocast)
  const int64_t C = x.size(-1);
  const Tensor x2 = x.contiguous().reshape({-1, C});
  const Tensor g2 = g.contiguous().reshape({-1, C});
  Tensor dx = Tensor::empty(X.shape, X.dtype);
  Tensor dx2 = dx.reshape({-1, C});
  // dweight / dbias accumulate: into the parameter buffers when there are, else into zeros.
  Tensor dw = W.grad_is_buffer ? param_grad(W) : Tensor::zeros({C}, W.dtype);
  Tensor db = Bi.grad_is_buffer ? param_grad(Bi) : Tensor::zeros({C}, Bi.dtype);
  layer_norm_backward(x2, n.in_values[1], n.b0 ? Tensor() : n.saved[0], n.saved[1], g2, dx2, dw, db);
  accumulate_grad(X, dx);
  if (!W.grad_is_buffer) accumulate_grad(W, dw);
  if (!Bi.grad_is_buffer) accumulate_grad(Bi, db);
}

void embedding_backward_rule(Node& n, const Tensor& g) {
  VarImpl& W = *n.inputs[0];
  const int64_t C = W.shape[1];
  const Tensor ids = n.ids.contiguous().reshape({-1});
  const Tensor g2 = g.contiguous().reshape({-1, C});
  // A padding row takes no gradient (torch's padding_idx): every contribution to it is dropped,
  // so clearing the row after the scatter-add is exact even in an accumulated buffer.
  const int64_t pad = n.i0 >= 0 && n.i0 < W.shape[0] ? n.i0 : -1;
  if (W.grad_is_buffer) {
    Tensor& dw = param_grad(W);
    embedding_backward(ids, g2, dw);
    if (pad >= 0) dw.select(0, pad).zero();
    return;
  }
  Tensor dw = Tensor::zeros(W.shape, W.dtype);
  embedding_backward(ids, g2, dw);
  if (pad >= 0) dw.select(0, pad).zero();
  accumulate_grad(W, dw);
}

void causal_softmax_backward_rule(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  Tensor dx = Tensor::empty(X.shape, X.dtype);
  causal_softmax_backward(n.saved[0], g, static_cast<float>(n.f), dx);
  accumulate_grad(X, dx);
}

// dx = scale * y (dy - sum_j dy_j y_j): y is 0 on masked keys, so the plain softmax backward
// gives them 0; the scale is applied in place.
void masked_softmax_backward_rule(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  Tensor dx = Tensor::empty(X.shape, X.dtype);
  softmax_last_backward(n.saved[0], g, dx);
  if (n.f != 1.0) scale(dx, static_cast<float>(n.f), dx);
  accumulate_grad(X, dx);
}

// The fused encoder attention (kernels/attention_ops.h): recomputes the probabilities per chunk.
void masked_attention_backward_rule(Node& n, const Tensor& g) {
  ProfileScope prof(WorkKind::attention);
  VarImpl& Q = *n.inputs[0];
  VarImpl& K = *n.inputs[1];
  VarImpl& V = *n.inputs[2];
  if (!Q.requires_grad && !K.requires_grad && !V.requires_grad) return;
  Tensor dq = Tensor::empty(Q.shape, Q.dtype), dk = Tensor::empty(K.shape, K.dtype),
         dv = Tensor::empty(V.shape, V.dtype);
  const float p = std::bit_cast<float>(static_cast<uint32_t>(n.i2));
  prof.moves(mixtrain::detail::bytes_of(
      {&n.in_values[0], &n.in_values[1], &n.in_values[2], &n.ids, &g, &dq, &dk, &dv}));
  masked_attention_backward(n.in_values[0], n.in_values[1], n.in_values[2], n.ids, g.contiguous(),
                            static_cast<float>(n.f), p, static_cast<uint64_t>(n.i0),
                            static_cast<uint64_t>(n.i1), dq, dk, dv);
  accumulate_grad(Q, dq);
  accumulate_grad(K, dk);
  accumulate_grad(V, dv);
}

// masked_attention_qkv: in place (b0: saved = qkv (B, T, 3C)) or on its heads (saved = q, k, v
// (B*H, T, D)); ids the key mask, f the scale, i0 the seed, i1 the offset, i2 the dropout p's bits,
// shape = {H}.
void masked_attention_qkv_backward_rule(Node& n, const Tensor& g) {
  ProfileScope prof(WorkKind::attention);
  VarImpl& X = *n.inputs[0];
  if (!X.requires_grad) return;
  const int64_t H = n.shape[0];
  const float p = std::bit_cast<float>(static_cast<uint32_t>(n.i2)), scale = static_cast<float>(n.f);
  const auto seed = static_cast<uint64_t>(n.i0), offset = static_cast<uint64_t>(n.i1);
  const DType t = n.saved[0].dtype();
  const Tensor gc = g.dtype() == t ? g.contiguous() : g.to(t, MemCategory::workspace);  // (B, T, C)
  const int64_t B = gc.size(0), T = gc.size(1), C = gc.size(2), D = C / H;
  Tensor dx = Tensor::empty(X.shape, t, MemCategory::activations);  // (B, T, 3C)
  prof.moves(mixtrain::detail::bytes_of({&gc, &dx, &n.ids}) + mixtrain::detail::bytes_of(n.saved));
  if (n.b0) {
    const Tensor& x = n.saved[0];
    Tensor dq = heads_view(dx, 0, H), dk = heads_view(dx, 1, H), dv = heads_view(dx, 2, H);
    masked_attention_fused_backward(heads_view(x, 0, H), heads_view(x, 1, H), heads_view(x, 2, H), n.ids,
                                    gc.reshape({B, T, H, D}).transpose(1, 2), scale, p, seed, offset, dq, dk,
                                    dv);
  } else {
    const Tensor &q = n.saved[0], &k = n.saved[1], &v = n.saved[2];
    Tensor gh = Tensor::empty(q.shape(), t, MemCategory::workspace);
    heads_copy(gc, {gh}, H, true);
    std::vector<Tensor> d;
    for (int i = 0; i < 3; ++i) d.push_back(Tensor::empty(q.shape(), t, MemCategory::workspace));
    masked_attention_backward(q, k, v, n.ids, gh, scale, p, seed, offset, d[0], d[1], d[2]);
    gh = Tensor();
    heads_copy(dx, d, H, false);
  }
  accumulate_grad(X, dx);
}

void cross_entropy_backward_rule(Node& n, const Tensor& g) {
  VarImpl& L = *n.inputs[0];
  const Tensor& logits = n.in_values[0];
  const int64_t V = logits.size(-1);
  Tensor dl = Tensor::empty(L.shape, L.dtype);
  Tensor dl2 = dl.reshape({-1, V});
  cross_entropy_backward(logits.contiguous().reshape({-1, V}), n.ids, static_cast<float>(g.item()), dl2);
  accumulate_grad(L, dl);
}

// lm_head_loss (functions.h). Where forward made the gradients for an upstream gradient of 1
// (saved: dx (N, C), dw (V, C) in fp32), they are scaled by this one and added. Otherwise (fp16)
// each chunk's logits are made again as forward made them, their gradient formed as
// cross_entropy's backward gives it (in the logits' dtype, as the unfused cast's backward rounds
// it) and multiplied into dx and dw before the next chunk.
void lm_head_loss_backward_rule(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  VarImpl& W = *n.inputs[1];
  const float dloss = static_cast<float>(g.item());
  if (n.saved.size() == 2) {
    // Scaled in place (backward runs once; the node owns them): what is allocated does not depend
    // on the gradient's value, so the meta device predicts it.
    Tensor& dx = n.saved[0];
    Tensor& dw = n.saved[1];
    if (dloss != 1.f) {
      mixtrain::scale(dx, dloss, dx);
      mixtrain::scale(dw, dloss, dw);
    }
    if (X.requires_grad) accumulate_grad(X, dx.reshape(X.shape));
    VarImpl& target = grad_target(W);
    if (target.requires_grad) {
      if (target.grad_is_buffer)
        add_inplace(param_grad(target), dw);
      else
        accumulate_grad(target,
                        dw.dtype() == target.dtype ? dw : dw.to(target.dtype, MemCategory::activations));
    }
    n.saved.clear();
    return;
  }
  const Tensor& x = n.in_values[0];                      // (N, C)
  const Tensor w = lm_head_gemm_weight(n.in_values[1]);  // (V, C), f32 where the GEMMs convert
  const int64_t N = x.size(0), chunk = n.i0, count = n.i1;
  Tensor dx = X.requires_grad ? Tensor::empty({N, x.size(1)}, x.dtype()) : Tensor();  // every row written
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t r1 = std::min(N, r0 + chunk);
    const Tensor xg = lm_head_gemm_operand(x.slice(0, r0, r1), w), tc = n.ids.slice(0, r0, r1);
    Tensor logits = lm_head_logits(xg, w, x.dtype());
    Tensor dxc = X.requires_grad ? dx.slice(0, r0, r1) : Tensor();
    const Tensor dlogits = lm_head_dlogits(logits, tc, dloss, count, w, X.requires_grad ? &dxc : nullptr);
    grad_gemm(W, dlogits, xg, true, false);  // dw += dlogits^T x
  }
  if (X.requires_grad) accumulate_grad(X, dx.reshape(X.shape));
}

void reshape_backward(Node& n, const Tensor& g) {
  accumulate_grad(*n.inputs[0], g.contiguous().reshape(n.shape));
}

// Adds g into this head part of qkv's gradient, in place: the three parts of one qkv fill one
// (B, T, 3C) gradient instead of three zero-padded ones summed.
void split_heads_backward(Node& n, const Tensor& g) {
  ProfileScope prof(WorkKind::elementwise);
  VarImpl& Q = *n.inputs[0];
  if (!Q.requires_grad) return;
  const int64_t H = n.i1;
  Tensor& d = grad_accumulator(Q);  // (B, T, 3C)
  const int64_t B = d.size(0), T = d.size(1), D = d.size(2) / 3 / H;
  Tensor part = heads_view(d, static_cast<int>(n.i0), H);  // (B, H, T, D), rows of D strided
  prof.moves(mixtrain::detail::bytes_of({&g}) +
             2 * mixtrain::detail::bytes_of({&part}));  // g read, its part read and written
  add_inplace(part, g.contiguous().reshape({B, H, T, D}));
}

void merge_heads_backward(Node& n, const Tensor& g) {
  ProfileScope prof(WorkKind::elementwise);
  VarImpl& Y = *n.inputs[0];
  const int64_t B = n.i0, BH = Y.shape[0], H = BH / B, T = Y.shape[1], D = Y.shape[2];
  Tensor d = Tensor::empty({B, H, T, D}, Y.dtype);
  prof.moves(mixtrain::detail::bytes_of({&g, &d}));
  d.copy_from(g.contiguous().reshape({B, T, H, D}).transpose(1, 2));
  accumulate_grad(Y, d.reshape({BH, T, D}));
}

void dropout_backward(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  Tensor dx = Tensor::empty(X.shape, X.dtype);
  dropout_mask(g, static_cast<float>(n.f), static_cast<uint64_t>(n.i0), static_cast<uint64_t>(n.i1), dx);
  accumulate_grad(X, dx);
}

void cast_backward(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  accumulate_grad(X, g.dtype() == X.dtype ? g : g.to(X.dtype, MemCategory::activations));
}

// Blocked causal attention's backward (attention_blocks.cpp), a chunk of heads at a time.
void attention_backward(Node& n, const Tensor& g) {
  ProfileScope prof(WorkKind::attention);
  VarImpl& Q = *n.inputs[0];
  VarImpl& K = *n.inputs[1];
  VarImpl& V = *n.inputs[2];
  const bool need_qk = Q.requires_grad || K.requires_grad, need_v = V.requires_grad;
  if (!need_qk && !need_v) return;
  const auto grad_of = [](const VarImpl& x, bool need) {
    return need ? Tensor::empty(x.shape, x.dtype) : Tensor();
  };
  const Tensor dq = grad_of(Q, need_qk), dk = grad_of(K, need_qk), dv = grad_of(V, need_v);
  prof.moves(
      mixtrain::detail::bytes_of({&n.in_values[0], &n.in_values[1], &n.in_values[2], &g, &dq, &dk, &dv}) +
      mixtrain::detail::bytes_of(n.saved));
  attention_heads_backward(n.in_values[0], n.in_values[1], n.in_values[2], n.saved, g.contiguous(),
                           static_cast<float>(n.f), dq, dk, dv);
  if (need_v) accumulate_grad(V, dv);
  if (!need_qk) return;
  accumulate_grad(Q, dq);
  accumulate_grad(K, dk);
}

// attention_qkv: saved = q, k, v (B*H, T, D), then the probability blocks. The gradient of the
// output is copied into heads, dq, dk, dv back into one (B, T, 3C) gradient (no zeros, no sums).
// With the fused kernel (i1 = 1): saved = x and the one block, everything read and written in place.
void attention_qkv_backward(Node& n, const Tensor& g) {
  ProfileScope prof(WorkKind::attention);
  VarImpl& X = *n.inputs[0];
  if (!X.requires_grad) return;
  if (n.i1 == 1) {  // the fused kernel, in place: saved = x (B, T, 3C), the probabilities
    const Tensor& x = n.saved[0];
    const int64_t H = n.i0, B = x.size(0), T = x.size(1), C = x.size(2) / 3, D = C / H;
    const Tensor gc = g.dtype() == x.dtype() ? g.contiguous() : g.to(x.dtype(), MemCategory::workspace);
    Tensor dx = Tensor::empty(X.shape, x.dtype(), MemCategory::activations);  // (B, T, 3C)
    prof.moves(mixtrain::detail::bytes_of({&gc, &dx}) + mixtrain::detail::bytes_of(n.saved));
    Tensor dq = heads_view(dx, 0, H), dk = heads_view(dx, 1, H), dv = heads_view(dx, 2, H);
    attention_fused_backward(heads_view(x, 0, H), heads_view(x, 1, H), heads_view(x, 2, H), n.saved[1],
                             gc.reshape({B, T, H, D}).transpose(1, 2), static_cast<float>(n.f), dq, dk, dv);
    accumulate_grad(X, dx);
    return;
  }
  const Tensor &q = n.saved[0], &k = n.saved[1], &v = n.saved[2];
  const std::vector<Tensor> probs(n.saved.begin() + 3, n.saved.end());
  const int64_t H = n.i0;
  Tensor gh = Tensor::empty(q.shape(), q.dtype(), MemCategory::workspace);
  // g and the saved heads and probabilities read, qkv's gradient (three heads' worth) written.
  prof.moves(mixtrain::detail::bytes_of({&g}) + mixtrain::detail::bytes_of(n.saved) +
             3 * mixtrain::detail::bytes_of({&q}));
  heads_copy(g.dtype() == q.dtype() ? g.contiguous() : g.to(q.dtype(), MemCategory::workspace), {gh}, H,
             true);
  std::vector<Tensor> d;
  for (int i = 0; i < 3; ++i) d.push_back(Tensor::empty(q.shape(), q.dtype(), MemCategory::workspace));
  attention_heads_backward(q, k, v, probs, gh, static_cast<float>(n.f), d[0], d[1], d[2]);
  gh = Tensor();
  Tensor dx = Tensor::empty(X.shape, q.dtype(), MemCategory::activations);  // (B, T, 3C)
  heads_copy(dx, d, H, false);
  accumulate_grad(X, dx);
}

// Runs the checkpointed function again with gradients on and backpropagates g through it: the
// parameters' gradients reach their buffers on the way, the input's comes back here.
void checkpoint_backward(Node& n, const Tensor& g) {
  VarImpl& X = *n.inputs[0];
  Var x(n.in_values[0], X.requires_grad);
  AllocSite again = alloc_site();  // the forward ops run again: named as recomputed, not backward
  again.backward = false;
  again.recompute = true;
  Var y;
  {
    const ScopedAllocSite site(again);
    y = n.fn(x);
  }
  if (y.requires_grad()) y.backward_from(g);
  if (X.requires_grad && x.grad().defined()) accumulate_grad(X, x.grad());
}

// The hook first (ZeRO-3 gathers a block's parameters here, before any of its ops' backward
// reads them), then the gradient unchanged.
void backward_hook_rule(Node& n, const Tensor& g) {
  if (n.on_backward) n.on_backward();
  accumulate_grad(*n.inputs[0], g);
}

// One row per op, indexed by OpKind: the backward rule and which inputs' values it reads (bit i:
// input i). A value no rule reads is not kept by the graph, e.g. softmax keeps its output, not
// its input; add, reshape, the head (un)shuffles, dropout and cast keep nothing.
struct RuleRow {
  BackwardRule rule;
  uint8_t reads_inputs;
};
constexpr std::array<RuleRow, kNumOpKinds> kRules = {{
    {matmul_backward, 0b011},               // matmul: dA needs B, dB needs A
    {linear_backward, 0b011},               // linear: x and w (the bias only by shape)
    {add_backward, 0b000},                  // add
    {mul_backward, 0b011},                  // mul
    {scale_backward, 0b000},                // scale
    {gelu_backward_rule, 0b001},            // gelu: its input
    {layer_norm_backward_rule, 0b011},      // layer_norm: x and weight (mean, rstd in saved)
    {embedding_backward_rule, 0b000},       // embedding: ids only
    {causal_softmax_backward_rule, 0b000},  // causal_softmax: its output (in saved)
    {cross_entropy_backward_rule, 0b001},   // cross_entropy: the logits
    {reshape_backward, 0b000},              // reshape
    {split_heads_backward, 0b000},          // split_heads
    {merge_heads_backward, 0b000},          // merge_heads
    {dropout_backward, 0b000},              // dropout: the mask is regenerated from the seed
    {cast_backward, 0b000},                 // cast
    {attention_backward, 0b111},            // attention: q, k, v (and the probability blocks in saved)
    {attention_qkv_backward, 0b000},    // attention_qkv: its q, k, v copies and probability blocks in saved
    {checkpoint_backward, 0b001},       // checkpoint: its input (recomputes the rest)
    {activation_backward_rule, 0b001},  // gelu_erf: its input
    {activation_backward_rule, 0b001},  // tanh: its input (tanh recomputed)
    {activation_backward_rule, 0b001},  // relu: its input
    {masked_softmax_backward_rule, 0b000},    // masked_softmax: its output (in saved)
    {masked_attention_backward_rule, 0b111},  // masked_attention: q, k, v (the mask in ids; nothing T x T)
    {masked_attention_qkv_backward_rule, 0b000},  // masked_attention_qkv: qkv or its heads in saved
    {fp8_linear_backward, 0b011},  // fp8_linear: x and w (released where forward's quantizations serve)
    {lm_head_loss_backward_rule, 0b011},  // lm_head_loss: x and w (the logits made again, a chunk at a time)
    {backward_hook_rule, 0b000},          // backward_hook: nothing
}};
static_assert(kRules.size() == kNumOpKinds);

constexpr std::array<std::string_view, kNumOpKinds> kNames = {"matmul",
                                                              "linear",
                                                              "add",
                                                              "mul",
                                                              "scale",
                                                              "gelu",
                                                              "layer_norm",
                                                              "embedding",
                                                              "causal_softmax",
                                                              "cross_entropy",
                                                              "reshape",
                                                              "split_heads",
                                                              "merge_heads",
                                                              "dropout",
                                                              "cast",
                                                              "attention",
                                                              "attention_qkv",
                                                              "checkpoint",
                                                              "gelu_erf",
                                                              "tanh",
                                                              "relu",
                                                              "masked_softmax",
                                                              "masked_attention",
                                                              "masked_attention_qkv",
                                                              "fp8_linear",
                                                              "lm_head_loss",
                                                              "backward_hook"};

}  // namespace

Tensor lm_head_gemm_weight(const Tensor& w) {
  const bool converts =
      (w.dtype() == DType::bf16 || w.dtype() == DType::f16) && gemm_converts_to_f32(w.dtype());
  if (!converts) return w;
  // The head's GEMMs take fp32 operands and need no converted copies: the buffers the body's
  // GEMMs grew (up to three of their largest conversions, kept between calls) go first.
  gemm_scratch_release();
  return w.to(DType::f32, MemCategory::workspace);
}

Tensor lm_head_gemm_operand(const Tensor& a, const Tensor& w_gemm) {
  return a.dtype() == w_gemm.dtype() ? a : a.to(w_gemm.dtype(), MemCategory::workspace);
}

Tensor lm_head_logits(const Tensor& xg, const Tensor& w, DType dtype) {
  Tensor logits = Tensor::empty({xg.size(0), w.size(0)}, dtype, MemCategory::workspace);
  GemmOptions o;
  o.trans_b = true;
  gemm(xg, w, logits, o);
  return logits;
}

Tensor lm_head_dlogits(Tensor& logits, const Tensor& targets, float dloss, int64_t count, const Tensor& w,
                       Tensor* dxc) {
  int64_t valid = targets.numel();  // on the meta device: no values, the value does not matter
  if (!targets.is_meta()) {
    valid = 0;
    const Tensor t = targets.contiguous();
    for (int64_t r = 0; r < t.numel(); ++r) valid += t.data<int32_t>()[r] != -1;
  }
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), MemCategory::workspace);
  cross_entropy_backward(logits, targets,
                         count > 0 ? dloss * static_cast<float>(valid) / static_cast<float>(count) : 0.f,
                         dlogits);
  logits = Tensor();
  dlogits = lm_head_gemm_operand(dlogits, w);  // the 16-bit one released when converted
  if (dxc) gemm(dlogits, w, *dxc);             // dx rows = dlogits w
  return dlogits;
}

Tensor saved_input(const Node& n, size_t i) {
  if (!(n.op == OpKind::linear && i == 0 && n.recompute_x)) return n.in_values.at(i);
  const Node* act = n.inputs[0]->grad_fn.get();
  if (act == nullptr || act->in_values.empty() || !act->in_values[0].defined())
    throw Error(
        "linear backward: its input was to be recomputed from an activation that no longer holds its input");
  const Tensor& pre = act->in_values[0];
  const ScopedOp site_op("recompute");  // names the tensor in the memory ledger (tensor/alloc_site.h)
  Tensor x = Tensor::empty(pre.shape(), pre.dtype(), MemCategory::workspace);
  if (act->op == OpKind::gelu)
    mixtrain::gelu(pre, x);
  else
    activation(activation_of(act->op), pre, x);
  return x;
}

const BackwardRule& backward_rule(OpKind k) { return kRules[static_cast<size_t>(k)].rule; }
bool backward_reads_input(OpKind k, size_t i) {
  return i < 8 && ((kRules[static_cast<size_t>(k)].reads_inputs >> i) & 1) != 0;
}
std::string_view op_kind_name(OpKind k) { return kNames[static_cast<size_t>(k)]; }

}  // namespace mixtrain::autograd
