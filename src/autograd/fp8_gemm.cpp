// The fp8 GEMM of autograd/fp8_linear.h, emulated exactly on the bf16 matrix units: every E4M3 and
// E5M2 value is a bf16 value, so a bf16 GEMM with fp32 accumulation on the codes is the fp8 GEMM;
// the recipes' scales multiply its fp32 result (per tensor, per row and column), or, being powers
// of two (MXFP8's E8M0, the block recipe's), are folded into the operands exactly.
#include <algorithm>
#include <string>

#include "internal.h"
#include "mixtrain/autograd/fp8_linear.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/kernels/quantize.h"

namespace mixtrain::autograd {
namespace {

// The scales of an operand's non-summed dimension as a vector of n: the grid itself (one per
// row or column), or its one value repeated (a per-tensor scale).
Tensor scale_vector(const Tensor& grid, int64_t n) {
  if (grid.numel() == n) return grid.reshape({n});
  Tensor v = Tensor::empty({n}, DType::f32, MemCategory::workspace);
  if (!v.device().is_meta()) v.fill(grid.to_doubles()[0]);
  return v;
}

}  // namespace

const char* fp8_role_name(Fp8Role r) {
  switch (r) {
    case Fp8Role::input:
      return "input";
    case Fp8Role::weight:
      return "weight";
    case Fp8Role::grad_output:
      return "grad_output";
  }
  return "?";
}

Fp8Operand fp8_operand(const Tensor& t, Fp8Site& site, Fp8Role role, bool reduce_along_cols,
                       MemCategory category) {
  const int ri = static_cast<int>(role);
  const Fp8Quant how =
      fp8_operand_quant(site.recipe, site.format(role), role == Fp8Role::weight, reduce_along_cols);
  const Shape grid = fp8_blocks(how, t.size(0), t.size(1)).grid();
  Fp8Operand o;
  o.q = Tensor::empty(t.shape(), DType::bf16, category);
  o.scale_inv = Tensor::empty(grid, DType::f32, category);  // kept with q when q is kept
  o.dequantized = how.dequantize;
  Tensor amax = Tensor::empty(grid, DType::f32, MemCategory::workspace);
  const bool meta = t.device().is_meta();
  Tensor given;
  if (site.recipe == Fp8Recipe::delayed) {
    given = Tensor::empty({1, 1}, DType::f32, MemCategory::workspace);
    if (!meta) given.fill(site.scale[size_t(ri)]);
  }
  fp8_quantize(t, how, given.defined() ? &given : nullptr, o.q, o.scale_inv, amax);
  if (site.collect && !meta) fp8_quant_error(t, how, o.q, o.scale_inv, site.stats[size_t(ri)]);
  if (!meta)  // the blocks' largest (an MXFP8 grid holds a value per 32 elements: the reduce kernel)
    site.step_amax[size_t(ri)] =
        std::max(site.step_amax[size_t(ri)], static_cast<float>(reduce(amax, ReduceOp::max)));
  return o;
}

void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, bool ta, bool tb, Tensor& out, const Tensor* bias,
              bool accumulate) {
  GemmOptions o;
  o.trans_a = ta;
  o.trans_b = tb;
  if (a.dequantized && b.dequantized) {
    if (accumulate) o.beta = 1.f;
    gemm(a.q, b.q, out, o, bias);
    return;
  }
  if (a.dequantized != b.dequantized)
    throw ArgumentError("fp8_gemm: both operands must be dequantized or neither (one recipe per GEMM)");
  if (a.scale_inv.numel() == 1 && b.scale_inv.numel() == 1) {
    // Per-tensor scales (delayed, current): alpha = sa * sb in the GEMM itself, as cuBLASLt's fp8
    // GEMM takes them (no pass over the output). The meta device reads no scale: any alpha != 1
    // plans the same GEMM.
    o.alpha = a.q.device().is_meta() ? 0.5f : a.scale_inv.data<float>()[0] * b.scale_inv.data<float>()[0];
    if (accumulate) o.beta = 1.f;
    gemm(a.q, b.q, out, o, bias);
    return;
  }
  const int64_t M = out.size(0), N = out.size(1);
  Tensor acc = Tensor::empty({M, N}, DType::f32, MemCategory::workspace);
  gemm(a.q, b.q, acc, o);
  const Tensor rs = scale_vector(a.scale_inv, M), cs = scale_vector(b.scale_inv, N);
  if (!accumulate) {
    dequantize_gemm(acc, rs, cs, bias, out);
    return;
  }
  dequantize_gemm(acc, rs, cs, bias, acc);
  add(out, acc, out);
}

}  // namespace mixtrain::autograd
