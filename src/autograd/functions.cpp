// Forward passes of the differentiable ops: run the kernel, record the node.
#include "mixtrain/autograd/functions.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "autograd/cast_hook.h"
#include "autograd/leaf_reads.h"
#include "autograd/probe_hook.h"
#include "internal.h"
#include "kernels/op_checks.h"
#include "kernels/ops_backward.h"
#include "mixtrain/autograd/fp8_linear.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/numeric/stochastic.h"
#include "tensor/alloc_site.h"

namespace mixtrain::autograd {
namespace {

bool needs_grad(std::initializer_list<const Var*> inputs) {
  if (!grad_enabled()) return false;
  for (const Var* v : inputs)
    if (v->defined() && v->requires_grad()) return true;
  return false;
}

// Wraps a forward result; when recording, attaches a node with the given inputs.
// A sampled step's numerics probe (autograd/probe_hook.h) sees the output first; not when
// activation checkpointing recomputes a forward in backward (forward already showed it).
Var make_output(Tensor value, std::shared_ptr<Node> node) {
  if (ProbeHook* p = probe_hook(); p && !alloc_site().recompute)
    p->forward_output(alloc_site().op, alloc_site().module, node.get(), value);
  Var out(std::move(value), node != nullptr);
  if (node) out.impl()->grad_fn = std::move(node);
  return out;
}

std::shared_ptr<Node> make_node(OpKind op, std::initializer_list<const Var*> inputs) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->module = alloc_site().module;
  for (const Var* v : inputs) {
    const bool keep = v->defined() && backward_reads_input(op, n->inputs.size());
    n->in_values.push_back(keep ? v->value() : Tensor());
    n->inputs.push_back(v->defined() ? v->impl() : std::make_shared<VarImpl>());
  }
  return n;
}

// The installed cast hook (autograd/cast_hook.h; amp's autocast) when it acts on this thread now,
// else null: then every op runs in its inputs' dtypes.
const CastHook* active_hook() {
  const CastHook* h = cast_hook();
  return h && h->active() ? h : nullptr;
}

// Autocast: inside an active region, replaces the op's inputs by their casts under the op's
// policy, recorded as cast ops, so the node below sees the cast values and backward runs the op
// in the dtype forward chose. Outside any region nothing changes.
// Then tells the leaf-read observer (autograd/leaf_reads.h) about the parameters the op reads as
// they are.
void autocast(OpKind op, std::initializer_list<Var*> inputs) {
  if (const CastHook* h = active_hook()) h->cast_inputs(op, inputs);
  for (const Var* v : inputs) note_leaf_read(*v);
}
DType autocast_output_dtype(OpKind op, DType input) {
  const CastHook* h = active_hook();
  return h ? h->output_dtype(op, input) : input;
}
DType autocast_promote_dtype(DType a, DType b) {
  const CastHook* h = active_hook();
  return h ? h->promote_dtype(a, b) : a;
}

void require(const Var& v, const char* op, const char* what) {
  if (!v.defined()) throw ArgumentError(std::string(op) + ": " + what + " is undefined");
}

// Output shape of gemm for given operands (validation itself happens in the kernel).
Shape matmul_shape(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Shape s;
  if (a.dim() == 3)
    s.push_back(a.size(0));
  else if (b.dim() == 3)
    s.push_back(b.size(0));
  if (a.dim() < 2 || b.dim() < 2)
    throw ShapeError("matmul: operands must be 2-D or 3-D, got a " + a.to_string() + " b " + b.to_string());
  s.push_back(ta ? a.size(-1) : a.size(-2));
  s.push_back(tb ? b.size(-2) : b.size(-1));
  return s;
}

}  // namespace

Var matmul(const Var& a_in, const Var& b_in, bool trans_a, bool trans_b) {
  ScopedOp site_op("matmul");  // names what this op allocates (tensor/alloc_site.h)
  Var a = a_in, b = b_in;
  autocast(OpKind::matmul, {&a, &b});
  require(a, "matmul", "a");
  require(b, "matmul", "b");
  // A batch of row blocks times one shared matrix is one 2-D GEMM over the stacked rows (and its
  // backward then needs no sum over the batch).
  if (a.value().dim() == 3 && b.value().dim() == 2 && !trans_a) {
    const int64_t Bt = a.size(0), M = a.size(1);
    Var out = matmul(reshape(a, {Bt * M, a.size(2)}), b, false, trans_b);
    return reshape(out, {Bt, M, out.size(1)});
  }
  Tensor out = Tensor::empty(matmul_shape(a.value(), b.value(), trans_a, trans_b), a.dtype());
  GemmOptions o;
  o.trans_a = trans_a;
  o.trans_b = trans_b;
  gemm(a.value(), b.value(), out, o);
  std::shared_ptr<Node> n;
  if (needs_grad({&a, &b})) {
    n = make_node(OpKind::matmul, {&a, &b});
    n->b0 = trans_a;
    n->b1 = trans_b;
  }
  return make_output(out, n);
}

Var linear(const Var& x_in, const Var& w_in, const Var& b_in) {
  ScopedOp site_op("linear");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in, w = w_in, b = b_in;
  autocast(OpKind::linear, {&x, &w, &b});
  require(x, "linear", "x");
  require(w, "linear", "w");
  // The GEMM adds an f32 bias row in its epilogue; a 16-bit bias widens to f32 exactly. An f64
  // bias (gradient checks) is added separately so no precision is lost.
  const bool bias_f64 = b.defined() && b.dtype() == DType::f64;
  LinearFrame f = linear_frame("linear", x.value(), w.value(), x.dtype(),
                               b.defined() && !bias_f64 ? &b.value() : nullptr);
  GemmOptions o;
  o.trans_b = true;
  gemm(f.x2, w.value(), f.out2, o, f.bias32.defined() ? &f.bias32 : nullptr);
  if (bias_f64) mixtrain::add(f.out2, b.value(), f.out2);
  std::shared_ptr<Node> n;
  if (needs_grad({&x, &w, &b})) {
    n = make_node(OpKind::linear, {&x, &w, &b});
    // x straight from GELU / ReLU / tanh, whose node keeps the input: backward makes x again
    // from it instead of keeping both (Node::recompute_x).
    const Node* act = x.impl()->grad_fn.get();
    if (act != nullptr && n->in_values[0].defined() && act->in_values.size() == 1 &&
        act->in_values[0].defined() &&
        (act->op == OpKind::gelu || act->op == OpKind::gelu_erf || act->op == OpKind::relu ||
         act->op == OpKind::tanh)) {
      n->in_values[0] = Tensor();
      n->recompute_x = true;
    }
  }
  return make_output(f.out, n);
}

Var fp8_linear(const Var& x_in, const Var& w_in, const Var& b_in, const std::shared_ptr<Fp8Site>& site) {
  ScopedOp site_op("fp8_linear");  // names what this op allocates (tensor/alloc_site.h)
  if (!site) throw ArgumentError("fp8_linear: no fp8 site");
  Var x = x_in, w = w_in, b = b_in;
  autocast(OpKind::fp8_linear, {&x, &w, &b});
  require(x, "fp8_linear", "x");
  require(w, "fp8_linear", "w");
  if (b.defined() && b.dtype() == DType::f64)
    throw DTypeError(
        "fp8_linear: an f64 bias (fp8 GEMMs are for training in 16 bits, not for gradient checks)");
  LinearFrame f =
      linear_frame("fp8_linear", x.value(), w.value(), x.dtype(), b.defined() ? &b.value() : nullptr);
  const bool grad = needs_grad({&x, &w, &b});
  // Backward takes the quantized x and w from here where the recipe allows (internal.h), instead
  // of x and w themselves: kept as MemCategory::fp8 then.
  const bool keep_x = grad && fp8_reuses_input(site->recipe),
             keep_w = grad && fp8_reuses_weight(site->recipe);
  const Fp8Operand xq =
      fp8_operand(f.x2, *site, Fp8Role::input, true, keep_x ? MemCategory::fp8 : MemCategory::workspace);
  const Fp8Operand wq = fp8_operand(w.value(), *site, Fp8Role::weight, true,
                                    keep_w ? MemCategory::fp8 : MemCategory::workspace);
  fp8_gemm(xq, wq, false, true, f.out2, b.defined() ? &f.bias32 : nullptr, false);  // x w^T
  std::shared_ptr<Node> n;
  if (grad) {
    n = make_node(OpKind::fp8_linear, {&x, &w, &b});
    n->fp8 = site;
    n->saved.resize(4);  // xq, its scales, wq, its scales (or undefined: quantized again)
    if (keep_x) {
      n->saved[0] = xq.q;
      n->saved[1] = xq.scale_inv;
      n->in_values[0] = Tensor();
    }
    if (keep_w) {
      n->saved[2] = wq.q;
      n->saved[3] = wq.scale_inv;
      n->in_values[1] = Tensor();
    }
  }
  return make_output(f.out, n);
}

Var add(const Var& a_in, const Var& b_in) {
  ScopedOp site_op("add");  // names what this op allocates (tensor/alloc_site.h)
  Var a = a_in, b = b_in;
  autocast(OpKind::add, {&a, &b});
  require(a, "add", "a");
  require(b, "add", "b");
  Tensor out = Tensor::empty(a.shape(), autocast_promote_dtype(a.dtype(), b.dtype()));
  mixtrain::add(a.value(), b.value(), out);
  std::shared_ptr<Node> n;
  if (needs_grad({&a, &b})) n = make_node(OpKind::add, {&a, &b});
  return make_output(out, n);
}

Var mul(const Var& a_in, const Var& b_in) {
  ScopedOp site_op("mul");  // names what this op allocates (tensor/alloc_site.h)
  Var a = a_in, b = b_in;
  autocast(OpKind::mul, {&a, &b});
  require(a, "mul", "a");
  require(b, "mul", "b");
  Tensor out = Tensor::empty(a.shape(), autocast_promote_dtype(a.dtype(), b.dtype()));
  mixtrain::mul(a.value(), b.value(), out);
  std::shared_ptr<Node> n;
  if (needs_grad({&a, &b})) n = make_node(OpKind::mul, {&a, &b});
  return make_output(out, n);
}

Var scale(const Var& a_in, float s) {
  ScopedOp site_op("scale");  // names what this op allocates (tensor/alloc_site.h)
  Var a = a_in;
  autocast(OpKind::scale, {&a});
  require(a, "scale", "a");
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  mixtrain::scale(a.value(), s, out);
  std::shared_ptr<Node> n;
  if (needs_grad({&a})) {
    n = make_node(OpKind::scale, {&a});
    n->f = s;
  }
  return make_output(out, n);
}

Var gelu(const Var& x_in) {
  ScopedOp site_op("gelu");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in;
  autocast(OpKind::gelu, {&x});
  require(x, "gelu", "x");
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  mixtrain::gelu(x.value(), out);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) n = make_node(OpKind::gelu, {&x});
  return make_output(out, n);
}

namespace {
Var activation_op(OpKind op, const char* name, Activation kind, const Var& x_in) {
  ScopedOp site_op(name);  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in;
  autocast(op, {&x});
  require(x, name, "x");
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  mixtrain::activation(kind, x.value(), out);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) n = make_node(op, {&x});
  return make_output(out, n);
}
}  // namespace

Var gelu_erf(const Var& x) { return activation_op(OpKind::gelu_erf, "gelu_erf", Activation::gelu_erf, x); }
Var tanh(const Var& x) { return activation_op(OpKind::tanh, "tanh", Activation::tanh, x); }
Var relu(const Var& x) { return activation_op(OpKind::relu, "relu", Activation::relu, x); }

Var layer_norm(const Var& x_in, const Var& weight_in, const Var& bias_in, float eps) {
  ScopedOp site_op("layer_norm");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in, weight = weight_in, bias = bias_in;
  autocast(OpKind::layer_norm, {&x, &weight, &bias});
  const DType out_dtype = autocast_output_dtype(OpKind::layer_norm, x.dtype());
  require(x, "layer_norm", "x");
  require(weight, "layer_norm", "weight");
  require(bias, "layer_norm", "bias");
  const int64_t C = x.size(-1);
  const Tensor x2 = x.value().contiguous().reshape({-1, C});
  const int64_t R = x2.size(0);
  Tensor out = Tensor::empty(x.shape(), out_dtype);
  Tensor out2 = out.reshape({R, C});
  Tensor mean = Tensor::empty({R}, DType::f32);
  Tensor rstd = Tensor::empty({R}, DType::f32);
  const bool grad = needs_grad({&x, &weight, &bias});
  // Under autocast with a wider input (the fp32 residual stream), backward gets x-hat in the
  // 16-bit compute dtype instead of x: half the bytes, and nothing else keeps the residual
  // alive. x-hat is O(1) (no cancellation), so rounding it costs one 16-bit rounding in dx and
  // dweight, like the 16-bit dout it meets there. (Apex's memory-efficient layer norm saves its
  // output for the same reason.) The forward output is unchanged (fp32 math, fp32 x-hat); the
  // kernel writes x-hat in the same pass.
  const CastHook* hook = cast_hook();
  const DType low = hook ? hook->compute_dtype() : DType::f32;  // f32 outside an enabled region
  const bool keep_xhat = grad && dtype_size(low) < dtype_size(x2.dtype()) && x2.dtype() == DType::f32;
  Tensor xhat = keep_xhat ? Tensor::empty({R, C}, low) : Tensor();
  mixtrain::layer_norm(x2, weight.value(), bias.value(), eps, out2, &mean, &rstd,
                       keep_xhat ? &xhat : nullptr);
  std::shared_ptr<Node> n;
  if (grad) {
    n = make_node(OpKind::layer_norm, {&x, &weight, &bias});
    n->saved = {mean, rstd};
    if (keep_xhat) {
      n->in_values[0] = xhat;
      n->b0 = true;  // in_values[0] is x-hat (backward passes no mean)
      n->saved[0] = Tensor();
    }
  }
  return make_output(out, n);
}

Var embedding(const Var& weight_in, const Tensor& ids, int64_t padding_idx) {
  ScopedOp site_op("embedding");  // names what this op allocates (tensor/alloc_site.h)
  Var weight = weight_in;
  autocast(OpKind::embedding, {&weight});
  require(weight, "embedding", "weight");
  Shape s = ids.shape();
  s.push_back(weight.size(1));
  Tensor out = Tensor::empty(s, weight.dtype());
  Tensor out2 = out.reshape({-1, weight.size(1)});
  mixtrain::embedding(weight.value(), ids.contiguous().reshape({-1}), out2);
  std::shared_ptr<Node> n;
  if (needs_grad({&weight})) {
    n = make_node(OpKind::embedding, {&weight});
    n->ids = ids;
    n->i0 = padding_idx;
  }
  return make_output(out, n);
}

Var causal_softmax(const Var& x_in, float scale_) {
  ScopedOp site_op("causal_softmax");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in;
  autocast(OpKind::causal_softmax, {&x});
  const DType out_dtype = autocast_output_dtype(OpKind::causal_softmax, x.dtype());
  require(x, "causal_softmax", "x");
  Tensor out = Tensor::empty(x.shape(), out_dtype);
  mixtrain::causal_softmax(x.value(), scale_, out);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) {
    n = make_node(OpKind::causal_softmax, {&x});
    n->saved = {out};
    n->f = scale_;
  }
  return make_output(out, n);
}

Var masked_softmax(const Var& x_in, const Tensor& key_mask, float scale_) {
  ScopedOp site_op("masked_softmax");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in;
  autocast(OpKind::masked_softmax, {&x});
  const DType out_dtype = autocast_output_dtype(OpKind::masked_softmax, x.dtype());
  require(x, "masked_softmax", "x");
  Tensor out = Tensor::empty(x.shape(), out_dtype);
  mixtrain::masked_softmax(x.value(), key_mask, scale_, out);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) {
    n = make_node(OpKind::masked_softmax, {&x});
    n->saved = {out};
    n->f = scale_;
  }
  return make_output(out, n);
}

Var masked_attention(const Var& q_in, const Var& k_in, const Var& v_in, const Tensor& key_mask, float scale_,
                     float p, uint64_t seed, uint64_t offset) {
  ScopedOp site_op("masked_attention");  // names what this op allocates (tensor/alloc_site.h)
  ProfileScope prof(WorkKind::attention);
  Var q = q_in, k = k_in, v = v_in;
  autocast(OpKind::masked_attention, {&q, &k, &v});
  require(q, "masked_attention", "q");
  require(k, "masked_attention", "k");
  require(v, "masked_attention", "v");
  const Tensor mask = key_mask.contiguous();
  Tensor out = Tensor::empty(q.shape(), q.dtype());
  prof.moves(mixtrain::detail::bytes_of({&q.value(), &k.value(), &v.value(), &mask, &out}));
  masked_attention_forward(q.value(), k.value(), v.value(), mask, scale_, p, seed, offset, out);
  std::shared_ptr<Node> n;
  if (needs_grad({&q, &k, &v})) {
    n = make_node(OpKind::masked_attention, {&q, &k, &v});
    n->ids = mask;
    n->f = scale_;
    n->i0 = static_cast<int64_t>(seed);
    n->i1 = static_cast<int64_t>(offset);
    n->i2 = std::bit_cast<uint32_t>(p);  // the dropout p, bit for bit (f holds the scale)
  }
  return make_output(out, n);
}

Var cross_entropy(const Var& logits_in, const Tensor& targets) {
  ScopedOp site_op("cross_entropy");  // names what this op allocates (tensor/alloc_site.h)
  Var logits = logits_in;
  autocast(OpKind::cross_entropy, {&logits});
  require(logits, "cross_entropy", "logits");
  const int64_t V = logits.size(-1);
  const Tensor l2 = logits.value().contiguous().reshape({-1, V});
  const Tensor t1 = targets.contiguous().reshape({-1});
  const double loss = mixtrain::cross_entropy(l2, t1, nullptr);
  Tensor out = Tensor::full({1}, logits.dtype() == DType::f64 ? DType::f64 : DType::f32, loss);
  std::shared_ptr<Node> n;
  if (needs_grad({&logits})) {
    n = make_node(OpKind::cross_entropy, {&logits});
    n->ids = t1;
  }
  return make_output(out, n);
}

Var lm_head_loss(const Var& x_in, const Var& w_in, const Tensor& targets, int64_t chunk_rows) {
  ScopedOp site_op("lm_head_loss");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in, w = w_in;
  autocast(OpKind::lm_head_loss, {&x, &w});
  require(x, "lm_head_loss", "x");
  require(w, "lm_head_loss", "w");
  const int64_t C = x.size(-1), V = w.size(0);
  if (w.value().dim() != 2 || w.size(1) != C)
    throw ShapeError("lm_head_loss: w must be (V, " + std::to_string(C) + "), got " + w.value().to_string());
  if (x.dtype() != w.dtype())
    throw DTypeError("lm_head_loss: x is " + std::string(dtype_name(x.dtype())) + ", w " +
                     std::string(dtype_name(w.dtype())));
  const Tensor x2 = x.value().contiguous().reshape({-1, C});  // (N, C)
  const Tensor t1 = targets.contiguous().reshape({-1});       // (N)
  const int64_t N = x2.size(0);
  if (t1.dtype() != DType::i32 || t1.numel() != N)
    throw ShapeError("lm_head_loss: targets must be i32 with one per row of x (" + std::to_string(N) +
                     "), got " + targets.to_string());
  // Rows per chunk: 8 Mi logits (32 MiB in fp32, 16 in bf16), and as many of their gradient; 2 Mi
  // where the 16-bit GEMMs convert their inputs to fp32 (a CPU without bf16 / fp16 units), as the
  // chunk's logits and their gradient are then also held in fp32 for the GEMMs (measured on Zen 3,
  // gpt-mini with V = 16384: 4 and 8 Mi ran no faster, and 8 Mi held 33 MiB more).
  const bool converts =
      (x.dtype() == DType::bf16 || x.dtype() == DType::f16) && gemm_converts_to_f32(x.dtype());
  const int64_t budget = converts ? int64_t{2} << 20 : int64_t{8} << 20;
  const int64_t chunk = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, budget / std::max<int64_t>(1, V));
  int64_t count = 0;  // the rows the mean is over (target -1: ignored)
  if (!t1.is_meta())
    for (int64_t r = 0; r < N; ++r) count += t1.data<int32_t>()[r] != -1;
  // The gradients for an upstream gradient of 1, made here while each chunk's logits exist (no
  // second logits GEMM; backward scales them), except in fp16: there the loss scale must reach
  // the logits' gradient before it is rounded to 16 bits, so backward makes it again then.
  const bool grad = needs_grad({&x, &w});
  const bool early = grad && x.dtype() != DType::f16;
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor dx1 = early ? Tensor::empty({N, C}, x.dtype(), MemCategory::activations) : Tensor();
  Tensor dw1 = early ? Tensor::zeros({V, C}, acc, MemCategory::activations) : Tensor();
  // Per-row losses as cross_entropy computes them from the logits in x's dtype (the unfused
  // matmul's output), summed in double.
  Tensor losses = Tensor::empty({N}, acc, MemCategory::workspace);
  const Tensor w_gemm = lm_head_gemm_weight(w.value());
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t r1 = std::min(N, r0 + chunk);
    const Tensor xg = lm_head_gemm_operand(x2.slice(0, r0, r1), w_gemm), tc = t1.slice(0, r0, r1);
    Tensor logits = lm_head_logits(xg, w_gemm, x.dtype());
    Tensor lc = losses.slice(0, r0, r1);
    mixtrain::cross_entropy(logits, tc, &lc);
    if (!early) continue;
    Tensor dxc = dx1.slice(0, r0, r1);
    const Tensor dlogits = lm_head_dlogits(logits, tc, 1.f, count, w_gemm, &dxc);
    GemmOptions t;
    t.trans_a = true;
    t.beta = 1.f;
    gemm(dlogits, xg, dw1, t);  // dw += dlogits^T x
  }
  double sum = 0;
  if (!losses.is_meta())
    for (int64_t r = 0; r < N; ++r)
      if (t1.data<int32_t>()[r] != -1)
        sum += acc == DType::f64 ? losses.data<double>()[r] : double(losses.data<float>()[r]);
  Tensor out = Tensor::full({1}, acc, count ? sum / static_cast<double>(count) : 0.0);
  std::shared_ptr<Node> n;
  if (grad) {
    n = make_node(OpKind::lm_head_loss, {&x, &w});
    n->ids = t1;
    n->i0 = chunk;
    n->i1 = count;
    if (early) {  // x and w are not read again
      n->in_values = {Tensor(), Tensor()};
      n->saved = {dx1, dw1};
    } else {
      n->in_values[0] = x2;
    }
  }
  return make_output(out, n);
}

Var reshape(const Var& x_in, const Shape& shape) {
  ScopedOp site_op("reshape");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in;
  autocast(OpKind::reshape, {&x});
  require(x, "reshape", "x");
  Tensor out = x.value().contiguous().reshape(shape);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) {
    n = make_node(OpKind::reshape, {&x});
    n->shape = x.shape();
  }
  return make_output(out, n);
}

// The (B, H, T, D) strided view of q, k or v inside qkv (B, T, 3C).
Tensor heads_view(const Tensor& qkv, int which, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C3 = qkv.size(2), C = C3 / 3, D = C / n_head;
  return qkv.as_strided({B, n_head, T, D}, {T * C3, D, C3, 1}, which * C);
}

namespace {
// qkv's value, contiguous, checked to be (B, T, 3C) with C divisible by n_head.
Tensor checked_qkv(const char* op, const Var& qkv, int64_t n_head) {
  require(qkv, op, "qkv");
  const Tensor v = qkv.value().contiguous();
  if (v.dim() != 3 || n_head <= 0 || v.size(2) % (3 * n_head) != 0)
    throw ShapeError(std::string(op) + ": qkv " + v.to_string() + " is not (B, T, 3C) with C divisible by " +
                     std::to_string(n_head) + " heads");
  return v;
}
}  // namespace

Var split_heads(const Var& qkv_in, int which, int64_t n_head) {
  ScopedOp site_op("split_heads");  // names what this op allocates (tensor/alloc_site.h)
  ProfileScope prof(WorkKind::elementwise);
  Var qkv = qkv_in;
  autocast(OpKind::split_heads, {&qkv});
  if (which < 0 || which > 2)
    throw ArgumentError("split_heads: which " + std::to_string(which) + " must be 0 (q), 1 (k) or 2 (v)");
  const Tensor v = checked_qkv("split_heads", qkv, n_head);
  const int64_t B = v.size(0), T = v.size(1), D = v.size(2) / 3 / n_head;
  // (B, T, 3C) -> slice which*C.. -> (B, T, H, D) -> (B, H, T, D) -> contiguous (B*H, T, D)
  Tensor heads = Tensor::empty({B, n_head, T, D}, v.dtype());
  prof.moves(2 * mixtrain::detail::bytes_of({&heads}));  // its third of qkv read, the heads written
  heads.copy_from(heads_view(v, which, n_head));
  std::shared_ptr<Node> n;
  if (needs_grad({&qkv})) {
    n = make_node(OpKind::split_heads, {&qkv});
    n->i0 = which;
    n->i1 = n_head;
  }
  return make_output(heads.reshape({B * n_head, T, D}), n);
}

Var merge_heads(const Var& y_in, int64_t batch) {
  ScopedOp site_op("merge_heads");  // names what this op allocates (tensor/alloc_site.h)
  ProfileScope prof(WorkKind::elementwise);
  Var y = y_in;
  autocast(OpKind::merge_heads, {&y});
  require(y, "merge_heads", "y");
  const Tensor& v = y.value();
  if (v.dim() != 3 || batch <= 0 || v.size(0) % batch != 0)
    throw ShapeError("merge_heads: y " + v.to_string() +
                     " is not (B*H, T, D) for B=" + std::to_string(batch));
  const int64_t H = v.size(0) / batch, T = v.size(1), D = v.size(2);
  // (B*H, T, D) -> (B, H, T, D) -> (B, T, H, D) -> contiguous (B, T, C)
  Tensor out = Tensor::empty({batch, T, H, D}, v.dtype());
  prof.moves(mixtrain::detail::bytes_of({&v, &out}));
  out.copy_from(v.contiguous().reshape({batch, H, T, D}).transpose(1, 2));
  std::shared_ptr<Node> n;
  if (needs_grad({&y})) {
    n = make_node(OpKind::merge_heads, {&y});
    n->i0 = batch;
  }
  return make_output(out.reshape({batch, T, H * D}), n);
}

Var dropout(const Var& x_in, float p, uint64_t seed, uint64_t offset, bool training) {
  ScopedOp site_op("dropout");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in;
  autocast(OpKind::dropout, {&x});
  require(x, "dropout", "x");
  if (!(p >= 0.f && p < 1.f)) throw ArgumentError("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (p == 0.f || !training) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dropout_mask(x.value(), p, seed, offset, out);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) {
    n = make_node(OpKind::dropout, {&x});
    n->f = p;
    n->i0 = static_cast<int64_t>(seed);
    n->i1 = static_cast<int64_t>(offset);
  }
  return make_output(out, n);
}

// An explicit dtype: never autocast (its policy is keep).
Var cast(const Var& x, DType dtype) {
  ScopedOp site_op("cast");  // names what this op allocates (tensor/alloc_site.h)
  require(x, "cast", "x");
  if (x.dtype() == dtype) return x;
  note_leaf_read(x);  // a parameter converted here (not served by a working copy) is read
  Tensor out = x.value().to(dtype, MemCategory::activations);
  std::shared_ptr<Node> n;
  if (needs_grad({&x})) n = make_node(OpKind::cast, {&x});
  return make_output(out, n);
}

// Blocked causal attention (attention_blocks.cpp), a chunk of heads at a time. Saved for backward:
// q, k, v and the probability blocks (the lower triangle only) in the compute dtype; under
// recompute q, k, v only.
Var attention(const Var& q_in, const Var& k_in, const Var& v_in, float scale_, AttentionProbs keep) {
  ScopedOp site_op("attention");  // names what this op allocates (tensor/alloc_site.h)
  ProfileScope prof(WorkKind::attention);
  Var q = q_in, k = k_in, v = v_in;
  autocast(OpKind::attention, {&q, &k, &v});
  require(q, "attention", "q");
  require(k, "attention", "k");
  require(v, "attention", "v");
  const Tensor &qv = q.value(), &kv = k.value(), &vv = v.value();
  if (qv.dim() != 3 || !(kv.shape() == qv.shape()) || !(vv.shape() == qv.shape()))
    throw ShapeError("attention: q " + qv.to_string() + ", k " + kv.to_string() + ", v " + vv.to_string() +
                     " must be equal (B*H, T, D)");
  if (kv.dtype() != qv.dtype() || vv.dtype() != qv.dtype())
    throw DTypeError("attention: q, k and v must share one dtype");
  std::vector<Tensor> probs;  // none kept under recompute
  if (keep == AttentionProbs::keep) probs = attention_prob_blocks(qv.size(0), qv.size(1), qv.dtype());
  Tensor out = Tensor::empty(qv.shape(), qv.dtype(), MemCategory::activations);  // (BH, T, D)
  attention_heads_forward(qv, kv, vv, scale_, probs, out);
  prof.moves(mixtrain::detail::bytes_of({&qv, &kv, &vv, &out}) +
             mixtrain::detail::bytes_of(probs));  // the probabilities are kept
  std::shared_ptr<Node> n;
  if (needs_grad({&q, &k, &v})) {
    n = make_node(OpKind::attention, {&q, &k, &v});
    n->saved = std::move(probs);
    n->f = scale_;
  }
  return make_output(out, n);
}

// q, k, v copied out of qkv in one pass (the GEMMs want each head contiguous), the output
// copied into (B, T, C) in one pass. Saved: q, k, v (B*H, T, D) and the probability blocks (none
// under recompute: backward makes them again).
Var attention_qkv(const Var& qkv_in, int64_t n_head, float scale_, AttentionProbs keep) {
  ScopedOp site_op("attention_qkv");  // names what this op allocates (tensor/alloc_site.h)
  ProfileScope prof(WorkKind::attention);
  Var qkv = qkv_in;
  autocast(OpKind::attention_qkv, {&qkv});
  const Tensor x = checked_qkv("attention_qkv", qkv, n_head);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2) / 3, H = n_head, D = C / H;
  // The fused kernel (kernels/attention_ops.h) reads q, k and v in place out of x and writes y in
  // place into the output rows: no head copies either way; backward then keeps x itself (i1 = 1).
  if (keep == AttentionProbs::keep) {  // the fused kernel keeps its probabilities
    if (std::vector<Tensor> probs = attention_prob_blocks(B * H, T, x.dtype());
        attention_fused_applies(heads_view(x, 0, H), probs)) {
      Tensor out = Tensor::empty({B, T, C}, x.dtype(), MemCategory::activations);
      Tensor y = out.reshape({B, T, H, D}).transpose(1, 2);  // (B, H, T, D) view of the rows
      attention_fused_forward(heads_view(x, 0, H), heads_view(x, 1, H), heads_view(x, 2, H), scale_, probs[0],
                              y);
      prof.moves(mixtrain::detail::bytes_of({&x, &out}) + mixtrain::detail::bytes_of(probs));
      std::shared_ptr<Node> n;
      if (needs_grad({&qkv})) {
        n = make_node(OpKind::attention_qkv, {&qkv});
        n->saved = {x, std::move(probs[0])};
        n->f = scale_;
        n->i0 = H;
        n->i1 = 1;
      }
      return make_output(out, n);
    }
  }
  std::vector<Tensor> qkv_heads;  // q, k, v: (B*H, T, D)
  for (int i = 0; i < 3; ++i)
    qkv_heads.push_back(Tensor::empty({B * H, T, D}, x.dtype(), MemCategory::activations));
  heads_copy(x, qkv_heads, H, true);
  std::vector<Tensor> probs;  // none kept under recompute, nor without a graph
  if (keep == AttentionProbs::keep && needs_grad({&qkv})) probs = attention_prob_blocks(B * H, T, x.dtype());
  Tensor y = Tensor::empty({B * H, T, D}, x.dtype(), MemCategory::workspace);
  attention_heads_forward(qkv_heads[0], qkv_heads[1], qkv_heads[2], scale_, probs, y);
  Tensor out = Tensor::empty({B, T, C}, x.dtype(), MemCategory::activations);
  heads_copy(out, {y}, H, false);
  // qkv read; the heads and the probabilities (kept for backward) and the output written.
  prof.moves(mixtrain::detail::bytes_of({&x, &out}) + mixtrain::detail::bytes_of(qkv_heads) +
             mixtrain::detail::bytes_of(probs));
  std::shared_ptr<Node> n;
  if (needs_grad({&qkv})) {
    n = make_node(OpKind::attention_qkv, {&qkv});
    n->saved = std::move(qkv_heads);
    for (Tensor& p : probs) n->saved.push_back(std::move(p));
    n->f = scale_;
    n->i0 = H;
  }
  return make_output(out, n);
}

Var masked_attention_qkv(const Var& qkv_in, const Tensor& key_mask, int64_t n_head, float scale_, float p,
                         uint64_t seed, uint64_t offset) {
  ScopedOp site_op("masked_attention_qkv");  // names what this op allocates (tensor/alloc_site.h)
  ProfileScope prof(WorkKind::attention);
  Var qkv = qkv_in;
  autocast(OpKind::masked_attention_qkv, {&qkv});
  const Tensor x = checked_qkv("masked_attention_qkv", qkv, n_head);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2) / 3, H = n_head, D = C / H;
  const Tensor mask = key_mask.contiguous();
  Tensor out = Tensor::empty({B, T, C}, x.dtype(), MemCategory::activations);
  const bool in_place = masked_attention_fused_applies(heads_view(x, 0, H));
  std::vector<Tensor> heads;  // q, k, v (B*H, T, D) where the fused kernel does not apply
  if (in_place) {
    Tensor y = out.reshape({B, T, H, D}).transpose(1, 2);  // (B, H, T, D) view of the rows
    masked_attention_fused_forward(heads_view(x, 0, H), heads_view(x, 1, H), heads_view(x, 2, H), mask,
                                   scale_, p, seed, offset, y);
  } else {
    for (int i = 0; i < 3; ++i)
      heads.push_back(Tensor::empty({B * H, T, D}, x.dtype(), MemCategory::activations));
    heads_copy(x, heads, H, true);
    Tensor y = Tensor::empty({B * H, T, D}, x.dtype(), MemCategory::workspace);
    masked_attention_forward(heads[0], heads[1], heads[2], mask, scale_, p, seed, offset, y);
    heads_copy(out, {y}, H, false);
  }
  prof.moves(mixtrain::detail::bytes_of({&x, &mask, &out}) + mixtrain::detail::bytes_of(heads));
  std::shared_ptr<Node> n;
  if (needs_grad({&qkv})) {
    n = make_node(OpKind::masked_attention_qkv, {&qkv});
    if (in_place)
      n->saved = {x};
    else
      n->saved = std::move(heads);
    n->b0 = in_place;
    n->ids = mask;
    n->f = scale_;
    n->i0 = static_cast<int64_t>(seed);
    n->i1 = static_cast<int64_t>(offset);
    n->i2 = std::bit_cast<uint32_t>(p);
    n->shape = Shape{H};  // the head count
  }
  return make_output(out, n);
}

Var checkpoint(const std::function<Var(const Var&)>& fn, const Var& x) {
  ScopedOp site_op("checkpoint");  // names what this op allocates (tensor/alloc_site.h)
  require(x, "checkpoint", "x");
  if (!grad_enabled()) return fn(x);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(x).value();
  }
  std::shared_ptr<Node> n = make_node(OpKind::checkpoint, {&x});
  n->in_values[0] = x.value();  // the one thing kept: the input
  // Recomputed in backward under the cast policy's state of now (no hook: nothing to restore).
  const CastHook* hook = cast_hook();
  n->fn = hook ? hook->bind_state(fn) : fn;
  return make_output(out, n);
}

Var backward_hook(const Var& x, std::function<void()> on_backward) {
  if (!needs_grad({&x})) return x;
  std::shared_ptr<Node> n = make_node(OpKind::backward_hook, {&x});
  n->on_backward = std::move(on_backward);
  return make_output(x.value(), n);
}

}  // namespace mixtrain::autograd
