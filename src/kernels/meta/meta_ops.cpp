// The meta backend (meta_ops.h): the CPU kernels' tracked temporaries, nothing computed.
//
// Each function repeats its CPU kernel's choice between the fast path and the scalar reference (the
// references allocate no tensors) and, on the fast path, makes the same tensors through the same
// helpers (cpu_rows.h: rows_or_copy copies a tensor with no row view, rows_for_output makes a
// workspace output for one, finish_output copies back), keeping them alive as long as the CPU
// kernel does. A new tensor temporary in a CPU kernel must be added here too; the memory
// prediction tests fail until it is.
#include "kernels/meta/meta_ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace {

using cpu::all_fast;  // the CPU kernels' choice of the fast path (cpu_rows.h)

// Unary row kernels (scale, gelu, causal_softmax, softmax_last): the input's rows and the output's.
void unary_rows(const Tensor& x, Tensor& out) {
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(out, ov);
  cpu::finish_output(o, out);
}

// Binary row kernels (gelu_backward, the softmax backwards): both inputs' rows and the output's.
void binary_rows(const Tensor& x, const Tensor& y, Tensor& out) {
  cpu::RowView xv, yv, ov;
  const Tensor xk = cpu::rows_or_copy(x, xv), yk = cpu::rows_or_copy(y, yv);
  Tensor o = cpu::rows_for_output(out, ov);
  cpu::finish_output(o, out);
}

// elementwise_cpu.cpp binary(): add and mul, b of a's shape or a (C) row.
void add_or_mul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (!all_fast({&a, &b, &out})) return;
  cpu::RowView av, bv, ov;
  const Tensor ak = cpu::rows_or_copy(a, av);
  Tensor bk = b;
  if (b.shape() == a.shape())
    bk = cpu::rows_or_copy(b, bv);
  else if (b.stride(0) != 1 && b.numel() > 1)
    bk = b.contiguous();
  Tensor o = cpu::rows_for_output(out, ov);
  cpu::finish_output(o, out);
}

// layer_norm_cpu.cpp write_stats(): a workspace copy for a statistics tensor that is not
// contiguous f32.
void write_stats(Tensor* t, int64_t rows) {
  if (!t || rows == 0) return;
  if (t->is_contiguous() && t->dtype() == DType::f32) return;
  const Tensor src = Tensor::empty(t->shape(), DType::f32, MemCategory::workspace);
  t->copy_from(src);
}

}  // namespace

void meta::gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias) {
  gemm_workspace_only(a, b, c, opt, bias);  // gemm_onednn.cpp: the CPU GEMM's plan and buffers
}

void meta::add(const Tensor& a, const Tensor& b, Tensor& out) { add_or_mul(a, b, out); }
void meta::mul(const Tensor& a, const Tensor& b, Tensor& out) { add_or_mul(a, b, out); }

void meta::scale(const Tensor& a, float, Tensor& out) {
  if (all_fast({&a, &out})) unary_rows(a, out);
}

void meta::gelu(const Tensor& x, Tensor& out) {
  if (all_fast({&x, &out})) unary_rows(x, out);
}

void meta::activation(Activation, const Tensor& x, Tensor& out) {  // encoder_cpu.cpp
  if (all_fast({&x, &out})) unary_rows(x, out);
}

double meta::reduce(const Tensor& x, ReduceOp) {  // reduce_cpu.cpp
  if (force_reference() || !cpu::fast_dtype(x.dtype())) return 0.0;
  const Tensor xc = x.contiguous();
  return 0.0;
}

void meta::reduce_last(const Tensor& x, ReduceOp, Tensor& out) {  // reduce_cpu.cpp
  cpu::RowView xv;
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype()) ||
      !cpu::as_rows(x, xv))
    return;
  Tensor o = out.is_contiguous() ? out : Tensor::empty(out.shape(), out.dtype(), MemCategory::workspace);
  if (o.raw_data() != out.raw_data()) out.copy_from(o);
}

void meta::sum_to_row(const Tensor&, Tensor&) {}  // reduce_cpu.cpp: host rows only

void meta::argmax_last(const Tensor&, Tensor&) {}  // reduce_cpu.cpp: rows read in place

void meta::softmax_last(const Tensor& x, Tensor& out) {  // softmax_cpu.cpp
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype())) return;
  unary_rows(x, out);
}

void meta::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float, Tensor& out,
                      Tensor* mean, Tensor* rstd, Tensor* xhat) {  // layer_norm_cpu.cpp
  const bool stats_ok = (!mean || mean->dtype() == DType::f32) && (!rstd || rstd->dtype() == DType::f32);
  if (force_reference() || !cpu::fast_dtype(x.dtype()) || !cpu::fast_dtype(out.dtype()) ||
      !cpu::fast_dtype(weight.dtype()) || !cpu::fast_dtype(bias.dtype()) || !stats_ok ||
      (xhat && !cpu::fast_dtype(xhat->dtype())))
    return;
  cpu::RowView xv, ov, hv;
  const Tensor xk = cpu::rows_or_copy(x, xv);
  Tensor o = cpu::rows_for_output(out, ov);
  Tensor h = xhat ? cpu::rows_for_output(*xhat, hv) : Tensor();
  cpu::finish_output(o, out);
  if (xhat) cpu::finish_output(h, *xhat);
  write_stats(mean, xv.rows);
  write_stats(rstd, xv.rows);
}

void meta::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {  // embedding_cpu.cpp
  if (force_reference() || !cpu::fast_dtype(weight.dtype()) || !cpu::fast_dtype(out.dtype())) return;
  cpu::RowView wv, ov;
  const Tensor wk = cpu::rows_or_copy(weight, wv);
  const Tensor idk = ids.contiguous();
  Tensor o = cpu::rows_for_output(out, ov);
  cpu::finish_output(o, out);
}

double meta::cross_entropy(const Tensor& logits, const Tensor& targets, Tensor* losses) {
  // cross_entropy_cpu.cpp
  if (force_reference() || !cpu::fast_dtype(logits.dtype()) || (losses && losses->dtype() != DType::f32))
    return 0.0;
  cpu::RowView xv;
  const Tensor xk = cpu::rows_or_copy(logits, xv);
  const Tensor tk = targets.contiguous();
  if (losses && xv.rows > 0 && !losses->is_contiguous())
    losses->copy_from(Tensor::empty(losses->shape(), DType::f32, MemCategory::workspace));
  return 0.0;
}

void meta::gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) {  // backward_cpu.cpp
  if (all_fast({&x, &dout, &dx})) binary_rows(x, dout, dx);
}

void meta::activation_backward(Activation, const Tensor& x, const Tensor& dout, Tensor& dx) {
  if (all_fast({&x, &dout, &dx})) binary_rows(x, dout, dx);  // encoder_cpu.cpp
}

void meta::masked_softmax(const Tensor& x, const Tensor& key_mask, float,
                          Tensor& y) {  // encoder_cpu.cpp
  if (all_fast({&x, &y}) && key_mask.is_contiguous()) unary_rows(x, y);
}

void meta::causal_softmax(const Tensor& x, float, Tensor& y) {  // backward_cpu.cpp
  if (all_fast({&x, &y})) unary_rows(x, y);
}

void meta::causal_softmax_backward(const Tensor& y, const Tensor& dy, float, Tensor& dx) {
  if (all_fast({&y, &dy, &dx})) binary_rows(y, dy, dx);  // backward_cpu.cpp softmax_backward()
}

void meta::softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (all_fast({&y, &dy, &dx})) binary_rows(y, dy, dx);
}

void meta::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                               const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const bool normalized = !mean.defined();  // backward_cpu.cpp
  if (!all_fast({&x, &weight, &dout, &dx, &dweight, &dbias}) || (!normalized && mean.dtype() != DType::f32) ||
      rstd.dtype() != DType::f32)
    return;
  binary_rows(x, dout, dx);
}

void meta::embedding_backward(const Tensor& ids, const Tensor& dout,
                              Tensor& dweight) {  // backward_cpu.cpp
  cpu::RowView wv, gv;
  if (!all_fast({&dout, &dweight}) || !cpu::as_rows(dweight, wv)) return;
  const Tensor gk = cpu::rows_or_copy(dout, gv);
  const Tensor idc = ids.contiguous();
}

void meta::cross_entropy_backward(const Tensor& logits, const Tensor& targets, float, Tensor& dlogits) {
  if (!all_fast({&logits, &dlogits})) return;  // backward_cpu.cpp
  cpu::RowView xv, ov;
  const Tensor xk = cpu::rows_or_copy(logits, xv);
  Tensor o = cpu::rows_for_output(dlogits, ov);
  const Tensor tc = targets.contiguous();
  cpu::finish_output(o, dlogits);
}

void meta::sum_to_row_accumulate(const Tensor& x, Tensor& out) {  // backward_cpu.cpp
  if (!all_fast({&x, &out})) return;
  Tensor tmp = Tensor::empty(Shape{out.size(0)}, DType::f32, MemCategory::workspace);
  meta::sum_to_row(x, tmp);
}

void meta::add_inplace(Tensor& acc, const Tensor& x) {  // backward_cpu.cpp
  if (all_fast({&acc, &x})) meta::add(acc, x, acc);
}

// adamw_cpu.cpp, sgd_cpu.cpp, gradient_cpu.cpp, attention_cpu.cpp heads_copy: no tensors.
void meta::adamw_update(Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, const std::vector<FlatSpan>&,
                        const AdamWScalars&, const LowpWrite&, const WorkingCopyOut&) {}
void meta::sgd_update(Tensor&, const Tensor&, Tensor&, Tensor&, const std::vector<FlatSpan>&,
                      const SgdScalars&, const LowpWrite&, const WorkingCopyOut&) {}
UnscaleResult meta::unscale_and_check(Tensor&, float) { return {}; }
double meta::global_norm(const Tensor&) { return 0.0; }
void meta::heads_copy(const Tensor&, const std::vector<Tensor>&, int64_t, bool) {}

// attention_fused_cpu.cpp: its workspace, unless force_reference() sends it to the reference.
void meta::attention_fused_forward(const Tensor& q, const Tensor&, const Tensor&, float, Tensor&, Tensor&) {
  if (!force_reference()) cpu::attention_fused_workspace(q, false);
}
void meta::attention_fused_backward(const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, float, Tensor&, Tensor&, Tensor&) {
  if (!force_reference()) cpu::attention_fused_workspace(q, true);
}

// attention_masked_cpu.cpp: its workspace, unless force_reference() sends it to the reference.
void meta::masked_attention_fused_forward(const Tensor& q, const Tensor&, const Tensor&, const Tensor&, float,
                                          float, uint64_t, uint64_t, Tensor&) {
  if (!force_reference()) cpu::masked_attention_fused_workspace(q, false);
}
void meta::masked_attention_fused_backward(const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, float, float, uint64_t, uint64_t, Tensor&, Tensor&,
                                           Tensor&) {
  if (!force_reference()) cpu::masked_attention_fused_workspace(q, true);
}

void meta::dropout_mask(const Tensor& x, float, uint64_t, uint64_t,
                        Tensor& out) {  // attention_cpu.cpp
  if (all_fast({&x, &out})) unary_rows(x, out);
}

}  // namespace mixtrain
