// The forward-only ops of quantized inference (autograd/functions.h: quantized_linear,
// quantized_embedding): kernels/quantize.h's kernels composed per scheme. They record no node.
#include <string>

#include "autograd/cast_hook.h"
#include "internal.h"
#include "mixtrain/autograd/functions.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/quantize.h"
#include "tensor/alloc_site.h"

namespace mixtrain::autograd {

Var quantized_linear(const Var& x_in, const QuantizedTensor& w, const Var& b_in, bool gelu_erf) {
  ScopedOp site_op("quantized_linear");  // names what this op allocates (tensor/alloc_site.h)
  Var x = x_in, b = b_in;
  if (const CastHook* h = cast_hook(); h && h->active()) h->cast_inputs(OpKind::linear, {&x, &b});
  if (!x.defined()) throw ArgumentError("quantized_linear: x is undefined");
  if (grad_enabled() && x.requires_grad())
    throw ArgumentError("quantized_linear: quantized weights are for inference; x requires a gradient");
  if (!w.codes.defined() || w.codes.dim() != 2)
    throw ArgumentError("quantized_linear: the weight is not a quantized matrix");
  const int64_t in = w.codes.size(1), outf = w.codes.size(0);
  LinearFrame f =
      linear_frame("quantized_linear", x.value(), w.codes, x.dtype(), b.defined() ? &b.value() : nullptr);
  const Tensor& x2 = f.x2;  // (M, IN)
  Tensor& out2 = f.out2;    // (M, OUT)
  const int64_t M = x2.size(0);
  const Tensor* bias = b.defined() ? &f.bias32 : nullptr;
  switch (w.scheme) {
    case QuantScheme::int8_dynamic: {
      Tensor qx = Tensor::empty({M, in}, DType::i8, MemCategory::workspace);
      Tensor sx = Tensor::empty({M}, DType::f32, MemCategory::workspace);
      quantize_rows(x2, qx, sx);
      gemm_s8_dequantized(qx, w.codes, sx, w.scale, bias, out2, gelu_erf);
      return Var(f.out);
    }
    case QuantScheme::fp8: {
      // E4M3 codes are bf16 values: the bf16 GEMM (fp32 accumulation) of the codes is the fp8 GEMM.
      Tensor qx = Tensor::empty({M, in}, DType::f8_e4m3, MemCategory::workspace);
      Tensor sx = Tensor::empty({M}, DType::f32, MemCategory::workspace);
      quantize_rows(x2, qx, sx);
      const Tensor qxb = qx.to(DType::bf16, MemCategory::workspace);
      qx = Tensor();
      const Tensor wb = w.codes.to(DType::bf16, MemCategory::workspace);
      Tensor acc = Tensor::empty({M, outf}, DType::f32, MemCategory::workspace);
      GemmOptions o;
      o.trans_b = true;
      gemm(qxb, wb, acc, o);
      dequantize_gemm(acc, sx, w.scale, bias, out2);
      break;
    }
    case QuantScheme::int8_weight: {
      const DType wd = x.dtype() == DType::f64 ? DType::f32 : x.dtype();
      Tensor wf = Tensor::empty({outf, in}, wd, MemCategory::workspace);
      dequantize_rows(w.codes, w.scale, wf);
      GemmOptions o;
      o.trans_b = true;
      gemm(x2, wf, out2, o, bias);
      break;
    }
    case QuantScheme::none:
      throw ArgumentError("quantized_linear: the weight has no quantization scheme");
  }
  if (gelu_erf) activation(Activation::gelu_erf, f.out, f.out);  // the op gelu_erf() runs
  return Var(f.out);
}

Var quantized_embedding(const QuantizedTensor& table, const Tensor& ids, DType dtype) {
  ScopedOp site_op("quantized_embedding");
  if (!table.codes.defined() || table.codes.dim() != 2)
    throw ArgumentError("quantized_embedding: the table is not a quantized matrix");
  Shape s = ids.shape();
  s.push_back(table.codes.size(1));
  Tensor out = Tensor::empty(s, dtype);
  Tensor out2 = out.reshape({-1, table.codes.size(1)});
  embedding_dequantized(table.codes, table.scale, ids.contiguous().reshape({-1}), out2);
  return Var(out);
}

}  // namespace mixtrain::autograd
