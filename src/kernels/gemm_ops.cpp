// The public gemm/matmul: every argument check (definedness, device, dtypes, ranks, shapes,
// layouts, sizes, aliasing) with a one-line message naming the op and the shapes, e.g.
// "gemm: a bf16(17, 5) and b bf16(6, 9): inner dims differ (5 vs 6)"; then dispatch to the backend
// of the tensors' device. Semantics follow BLAS sgemm: c = alpha * op(a) @ op(b) + beta * c (+ bias),
// c not read when beta == 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const Tensor&, Tensor&, const GemmOptions&, const Tensor*)> gemm{
    "gemm", ref::gemm, cpu::gemm, meta::gemm};
}  // namespace ops

namespace {

using detail::Arg;

// The sizes of one checked problem: c (Bt, M, N) = op(a) (Bt, M, K) @ op(b) (Bt|1, K, N).
struct GemmDims {
  bool batched = false;
  int64_t Bt = 1, M = 0, N = 0, K = 0;
};

std::string operand(const char* name, const Tensor& t, bool trans) {
  return std::string(name) + " " + t.to_string() + (trans ? "^T" : "");
}

std::string inputs(const char* op, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  return std::string(op) + ": " + operand("a", a, opt.trans_a) + " and " + operand("b", b, opt.trans_b);
}

bool is_gemm_input_dtype(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f64;
}

// One of the last two dims has stride 1 and the other steps over it without overlap (a dense
// matrix, a transposed view, or rows sliced out of a wider one); a dim of extent 1 may have any
// stride. The batch dim may have any non-negative stride.
void check_layout(const char* op, const char* name, const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d)
    if (t.stride(d) < 0 || (t.size(d) > 1 && t.stride(d) == 0 && d >= t.dim() - 2))
      throw ShapeError(std::string(op) + ": " + name + " " + t.to_string() + " with strides " +
                       t.strides().to_string() + ": unsupported layout (negative or zero stride)");
  const int64_t R = t.size(-2), C = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  if (R <= 1 || C <= 1) return;    // a vector: any stride
  if (sc == 1 && sr >= C) return;  // row-major, leading dim sr
  if (sr == 1 && sc >= R) return;  // column-major (a transposed view)
  throw ShapeError(std::string(op) + ": " + name + " " + t.to_string() + " with strides " +
                   t.strides().to_string() +
                   ": unsupported layout (one of the last two dims must have stride 1 and the other "
                   "must step over it; make it contiguous first)");
}

// Checks a, b (and their options) and returns the problem sizes. Used by gemm and matmul.
GemmDims check_inputs(const char* op, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  detail::check_defined_same_device(op, {Arg{"a", &a}, Arg{"b", &b}});
  for (const Arg& x : {Arg{"a", &a}, Arg{"b", &b}})
    if (!is_gemm_input_dtype(x.t->dtype()))
      throw DTypeError(std::string(op) + ": " + detail::describe(x.name, *x.t) +
                       ": inputs must be f32, bf16 or f16 (or f64 for gradient checks)");
  if (a.dtype() != b.dtype()) throw DTypeError(inputs(op, a, b, opt) + ": input dtypes differ");

  if (a.dim() != 2 && a.dim() != 3)
    throw ShapeError(std::string(op) + ": " + detail::describe("a", a) +
                     " must be 2-D (M, K) or 3-D (Bt, M, K)");
  if (b.dim() != 2 && b.dim() != 3)
    throw ShapeError(std::string(op) + ": " + detail::describe("b", b) +
                     " must be 2-D (K, N) or 3-D (Bt, K, N)");
  if (b.dim() == 3 && a.dim() == 2)
    throw ShapeError(inputs(op, a, b, opt) + ": b is batched but a is not (batch a too)");

  GemmDims d;
  d.batched = a.dim() == 3;
  d.Bt = d.batched ? a.size(0) : 1;
  d.M = opt.trans_a ? a.size(-1) : a.size(-2);
  d.K = opt.trans_a ? a.size(-2) : a.size(-1);
  const int64_t Kb = opt.trans_b ? b.size(-1) : b.size(-2);
  d.N = opt.trans_b ? b.size(-2) : b.size(-1);
  if (d.K != Kb)
    throw ShapeError(inputs(op, a, b, opt) + ": inner dims differ (" + std::to_string(d.K) + " vs " +
                     std::to_string(Kb) + ")");
  if (b.dim() == 3 && b.size(0) != d.Bt)
    throw ShapeError(inputs(op, a, b, opt) + ": batch sizes differ (" + std::to_string(d.Bt) + " vs " +
                     std::to_string(b.size(0)) + ")");
  check_layout(op, "a", a);
  check_layout(op, "b", b);

  // Bt * M * N * K must fit in int64 (flop counts, oneDNN's dims); each tensor's own size was
  // checked when it was made.
  int64_t work = 0;
  if (__builtin_mul_overflow(d.Bt, d.M, &work) || __builtin_mul_overflow(work, d.N, &work) ||
      __builtin_mul_overflow(work, d.K, &work))
    throw ShapeError(inputs(op, a, b, opt) + ": problem too large (Bt*M*N*K overflows int64)");
  if (!std::isfinite(opt.alpha) || !std::isfinite(opt.beta))
    throw ArgumentError(inputs(op, a, b, opt) + ": alpha and beta must be finite (alpha=" +
                        std::to_string(opt.alpha) + " beta=" + std::to_string(opt.beta) + ")");
  return d;
}

// [first byte, last byte + 1) spanned by a tensor (strides are non-negative here).
std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& t) {
  const auto lo = reinterpret_cast<uintptr_t>(t.raw_data());
  int64_t last = 0;
  for (int d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {lo, lo + static_cast<uintptr_t>(last + 1) * dtype_size(t.dtype())};
}

bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.numel() == 0 || y.numel() == 0 || x.storage() != y.storage()) return false;
  const auto [xl, xh] = byte_span(x);
  const auto [yl, yh] = byte_span(y);
  return xl < yh && yl < xh;
}

std::mutex g_problems_mu;
std::map<GemmProblem, int64_t> g_problems;  // the profiled stretch's problems, with their calls

void record_problem(const GemmDims& d, const Tensor& a, const Tensor& b, const Tensor& c,
                    const GemmOptions& opt, const Tensor* bias) {
  GemmProblem p;
  p.batch = d.Bt;
  p.m = d.M;
  p.n = d.N;
  p.k = d.K;
  p.batched_b = b.dim() == 3;
  p.in = a.dtype();
  p.out = c.dtype();
  p.trans_a = opt.trans_a;
  p.trans_b = opt.trans_b;
  p.bias = bias != nullptr;
  p.accumulate = opt.beta != 0.f;
  ProfileScope::outer_kind(p.kind);
  std::lock_guard<std::mutex> lock(g_problems_mu);
  ++g_problems[p];
}

}  // namespace

std::vector<GemmProblemCalls> profiled_gemm_problems() {
  std::lock_guard<std::mutex> lock(g_problems_mu);
  std::vector<GemmProblemCalls> out;
  for (const auto& [p, calls] : g_problems) out.push_back({p, calls});
  return out;
}

void clear_profiled_gemm_problems() {
  std::lock_guard<std::mutex> lock(g_problems_mu);
  g_problems.clear();
}

double time_gemm_problem(const GemmProblem& p, double budget_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto dims = [&](int64_t rows, int64_t cols, bool batched) {
    return batched && p.batch > 1 ? Shape{p.batch, rows, cols} : Shape{rows, cols};
  };
  const bool batched = p.batch > 1;
  const Tensor a = Tensor::randn(p.trans_a ? dims(p.k, p.m, batched) : dims(p.m, p.k, batched), p.in, 1, 0.f,
                                 1.f, MemCategory::workspace);
  const bool bb = batched && p.batched_b;
  const Tensor b = Tensor::randn(p.trans_b ? dims(p.n, p.k, bb) : dims(p.k, p.n, bb), p.in, 2, 0.f, 1.f,
                                 MemCategory::workspace);
  Tensor c = Tensor::zeros(dims(p.m, p.n, batched), p.out, MemCategory::workspace);
  const Tensor bias = p.bias ? Tensor::zeros({p.n}, DType::f32, MemCategory::workspace) : Tensor();
  GemmOptions opt;
  opt.trans_a = p.trans_a;
  opt.trans_b = p.trans_b;
  opt.beta = p.accumulate ? 1.f : 0.f;
  const auto once = [&] {
    const auto t0 = Clock::now();
    gemm(a, b, c, opt, p.bias ? &bias : nullptr);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double first = once();  // creates and caches the primitive
  std::vector<double> times;
  double spent = first;
  while (times.size() < 3 || (spent < budget_seconds && times.size() < 1000)) {
    times.push_back(once());
    spent += times.back();
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias) {
  ProfileScope prof(WorkKind::gemm);
  prof.moves(detail::bytes_of({&a, &b, &c, bias}));
  const char* op = "gemm";
  detail::check_defined_same_device(op, {Arg{"a", &a}, Arg{"b", &b}, Arg{"c", &c}});
  if (bias) detail::check_defined_same_device(op, {Arg{"a", &a}, Arg{"bias", bias}});
  const GemmDims d = check_inputs(op, a, b, opt);

  const bool f64 = a.dtype() == DType::f64;
  if (f64 ? c.dtype() != DType::f64
          : (c.dtype() != DType::f32 && c.dtype() != DType::bf16 && c.dtype() != DType::f16))
    throw DTypeError(inputs(op, a, b, opt) + ": output c " + c.to_string() + " must be " +
                     (f64 ? "f64 (the inputs are f64)" : "f32, bf16 or f16"));
  const Shape want = d.batched ? Shape{d.Bt, d.M, d.N} : Shape{d.M, d.N};
  if (!(c.shape() == want))
    throw ShapeError(inputs(op, a, b, opt) + " give " + want.to_string() + " but output c is " +
                     c.to_string());
  check_layout(op, "c", c);
  if (c.dim() == 3 && c.size(0) > 1 && c.stride(0) == 0)
    throw ShapeError(std::string(op) + ": output c " + c.to_string() +
                     " has batch stride 0 (batches would overlap)");

  if (bias) {
    if (bias->dtype() != DType::f32 && !(f64 && bias->dtype() == DType::f64))
      throw DTypeError(inputs(op, a, b, opt) + ": bias " + bias->to_string() + " must be f32" +
                       (f64 ? " or f64" : ""));
    if (bias->dim() != 1 || bias->size(0) != d.N)
      throw ShapeError(inputs(op, a, b, opt) + ": bias " + bias->to_string() + " must be a row (N) = (" +
                       std::to_string(d.N) + ")");
    if (d.N > 1 && bias->stride(0) <= 0)
      throw ShapeError(std::string(op) + ": bias " + bias->to_string() + " with strides " +
                       bias->strides().to_string() + ": unsupported layout");
  }

  // The output is written while the inputs are read: it must not share memory with them.
  for (const Arg& x : {Arg{"a", &a}, Arg{"b", &b}, Arg{"bias", bias}})
    if (x.t && overlaps(c, *x.t))
      throw ArgumentError(std::string(op) + ": output c " + c.to_string() + " overlaps input " +
                          detail::describe(x.name, *x.t));

  if (Profiler::enabled() && !a.is_meta()) record_problem(d, a, b, c, opt, bias);
  ops::gemm(a.device(), a, b, c, opt, bias);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out_dtype,
              MemCategory category) {
  ProfileScope prof(WorkKind::gemm);
  GemmOptions opt;
  opt.trans_a = trans_a;
  opt.trans_b = trans_b;
  const GemmDims d = check_inputs("matmul", a, b, opt);
  const bool f64 = a.dtype() == DType::f64;
  if (f64 ? out_dtype != DType::f64
          : (out_dtype != DType::f32 && out_dtype != DType::bf16 && out_dtype != DType::f16))
    throw DTypeError(inputs("matmul", a, b, opt) + ": output dtype " + std::string(dtype_name(out_dtype)) +
                     " must be " + (f64 ? "f64 (the inputs are f64)" : "f32, bf16 or f16"));
  Tensor c =
      Tensor::empty(d.batched ? Shape{d.Bt, d.M, d.N} : Shape{d.M, d.N}, out_dtype, category, a.device());
  prof.moves(detail::bytes_of({&a, &b, &c}));
  gemm(a, b, c, opt);
  return c;
}

}  // namespace mixtrain
