// One recorded op of the autograd graph: its kind (the index into the backward-rule table), its
// inputs, the tensors backward needs, and a few scalar attributes.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/autograd/variable.h"

namespace mixtrain::autograd {

struct Fp8Site;  // autograd/fp8_linear.h

enum class OpKind : uint8_t {
  matmul,            // out = op(a) @ op(b), batched
  linear,            // out = x @ w^T (+ b)
  add,               // out = a + b (b same shape or a row)
  mul,               // out = a * b (b same shape or a row)
  scale,             // out = s * a
  gelu,              // tanh form
  layer_norm,        // over the last dim
  embedding,         // out = weight[ids]
  causal_softmax,    // softmax(scale * x) with a causal mask, over the last dim
  cross_entropy,     // mean loss from logits
  reshape,           // view with another shape
  split_heads,       // (B, T, 3C) -> one of q, k, v as (B*H, T, D), contiguous
  merge_heads,       // (B*H, T, D) -> (B, T, C), contiguous
  dropout,           // out = x * mask / (1 - p)
  cast,              // out = x in another dtype; backward casts the gradient back
  attention,         // out = softmax(scale * q k^T, causal) v, batched over heads
  attention_qkv,     // the same read from qkv (B, T, 3C) in place, written as (B, T, C): no head copies
  checkpoint,        // out = fn(x), recomputed with gradients in backward (activation checkpointing)
  gelu_erf,          // exact GELU (BERT), activation kernel
  tanh,              // tanh (BERT's pooler)
  relu,              // max(x, 0)
  masked_softmax,    // softmax(scale * x) over the last dim with a key padding mask (bidirectional)
  masked_attention,  // dropout(masked_softmax(scale * q k^T)) v, nothing T x T kept (recomputed in backward)
  masked_attention_qkv,  // the same read from qkv (B, T, 3C), written as (B, T, C): in place where fused
  fp8_linear,            // out = x @ w^T (+ b), the GEMMs on fp8-quantized operands (autograd/fp8_linear.h)
  lm_head_loss,          // mean cross-entropy of x @ w^T, a chunk of rows at a time: the logits never whole
  backward_hook,  // out = x; backward calls a function first, then passes the gradient on (ZeRO-3's gathers)
  count_,
};
constexpr size_t kNumOpKinds = static_cast<size_t>(OpKind::count_);
std::string_view op_kind_name(OpKind k);

struct Node {
  OpKind op;
  std::vector<std::shared_ptr<VarImpl>> inputs;  // gradient edges (their values may be released)
  std::vector<Tensor> in_values;   // in_values[i]: input i's value if backward reads it, else undefined
  std::vector<Tensor> saved;       // what backward needs (e.g. the GELU input, layer-norm mean/rstd)
  Tensor ids;                      // integer input (embedding ids, cross-entropy targets)
  Shape shape;                     // e.g. the input shape of a reshape
  double f = 0;                    // scalar attribute (scale, eps, dropout p)
  int64_t i0 = 0, i1 = 0, i2 = 0;  // integer attributes (heads, which of q/k/v, ...)
  bool b0 = false, b1 = false;     // flags (transposes)
  // linear: its input x is an activation's output (GELU, ReLU, tanh) whose input the activation's
  // node keeps; x was not kept but is computed again from that input when backward reads it
  // (recomputed_input), as torch.compile's partitioner recomputes pointwise ops instead of saving
  // them: the FFN keeps one (B, T, 4C) tensor instead of two. The same kernel on the same input:
  // bit for bit the forward's x.
  bool recompute_x = false;
  std::function<Var(const Var&)> fn;  // checkpoint: runs the function again, in the forward's autocast state
  std::function<void()> on_backward;  // backward_hook: called when backward reaches the node
  const std::string* module = nullptr;  // the nn module that recorded it (names memory in backward), or null
  std::shared_ptr<Fp8Site> fp8;         // fp8_linear: its site (recipe, formats, delayed-scaling state)
};

// Input i's value as the op saw it in forward: in_values[i], or for a linear with recompute_x
// the activation's output made again from its input (a new tensor, MemCategory::workspace).
Tensor saved_input(const Node& n, size_t i);

// The backward rule of each op: given the node and d(loss)/d(output), accumulates
// d(loss)/d(input) into every input that requires a gradient.
using BackwardRule = void (*)(Node& node, const Tensor& grad_out);
const BackwardRule& backward_rule(OpKind k);
// Whether op k's backward rule reads the value of input i (else the node keeps only the edge,
// and the value is freed as soon as the forward pass no longer holds it).
bool backward_reads_input(OpKind k, size_t i);

// Adds g into the gradient of `in` (no-op if it does not require grad). Takes g without copying
// when `in` has no gradient yet; never writes into a tensor it does not own.
void accumulate_grad(VarImpl& in, const Tensor& g);
// The gradient of `in` as a tensor the caller may add into in place (for a rule that contributes
// to a part of its input, e.g. one head of qkv): zeros when there is none yet, a private copy when
// the current one is shared with anything else, else the gradient itself. `in` must require grad.
Tensor& grad_accumulator(VarImpl& in);
// Where a backward rule writes (GEMM with beta = 1, column sums, scatter-add) the gradient of a
// parameter (grad_is_buffer): its buffer, or inside a FreshGradScope a zeroed tensor of its own,
// made at the first write.
Tensor& param_grad(VarImpl& in);

}  // namespace mixtrain::autograd
