// The public backward ops (kernels/ops_backward.h): argument checks with one-line messages naming
// the op and the shapes, e.g. "layer_norm_backward: dweight f32(7) does not match weight f32(8)",
// then dispatch to the backend of the tensors' device. f64 tensors are accepted (the CPU backend
// routes them to the double-precision references) so gradient checks can run through here.
#include <cmath>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ops_backward.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/profiler.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const Tensor&, Tensor&)> gelu_backward{"gelu_backward", ref::gelu_backward,
                                                                    cpu::gelu_backward, meta::gelu_backward};
const Op<void(const Tensor&, float, Tensor&)> causal_softmax{"causal_softmax", ref::causal_softmax,
                                                             cpu::causal_softmax, meta::causal_softmax};
const Op<void(const Tensor&, const Tensor&, float, Tensor&)> causal_softmax_backward{
    "causal_softmax_backward", ref::causal_softmax_backward, cpu::causal_softmax_backward,
    meta::causal_softmax_backward};
const Op<void(const Tensor&, const Tensor&, Tensor&)> softmax_last_backward{
    "softmax_last_backward", ref::softmax_last_backward, cpu::softmax_last_backward,
    meta::softmax_last_backward};
const Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
              Tensor&)>
    layer_norm_backward{"layer_norm_backward", ref::layer_norm_backward, cpu::layer_norm_backward,
                        meta::layer_norm_backward};
const Op<void(const Tensor&, const Tensor&, Tensor&)> embedding_backward{
    "embedding_backward", ref::embedding_backward, cpu::embedding_backward, meta::embedding_backward};
const Op<void(const Tensor&, const Tensor&, float, Tensor&)> cross_entropy_backward{
    "cross_entropy_backward", ref::cross_entropy_backward, cpu::cross_entropy_backward,
    meta::cross_entropy_backward};
const Op<void(const Tensor&, Tensor&)> sum_to_row_accumulate{
    "sum_to_row_accumulate", ref::sum_to_row_accumulate, cpu::sum_to_row_accumulate,
    meta::sum_to_row_accumulate};
const Op<void(Tensor&, const Tensor&)> add_inplace{"add_inplace", ref::add_inplace, cpu::add_inplace,
                                                   meta::add_inplace};
}  // namespace ops

namespace {
using detail::Arg;

void check_finite(const char* op, const char* name, float v) {
  if (!std::isfinite(v))
    throw ArgumentError(std::string(op) + ": " + name + " must be finite (got " + std::to_string(v) + ")");
}

// The (..., Tq, Tk) attention tensors of causal_softmax(_backward): Tq <= Tk.
void check_causal_shape(const char* op, const Arg& a) {
  detail::check_min_dim(op, a, 2);
  if (a.t->size(-2) > a.t->size(-1))
    throw ShapeError(std::string(op) + ": " + detail::describe(a.name, *a.t) + " has Tq = " +
                     std::to_string(a.t->size(-2)) + " > Tk = " + std::to_string(a.t->size(-1)) +
                     " (rows before the first key would attend to nothing)");
}

// A (C) vector matching the last dim of x.
void check_row_vector(const char* op, const Arg& v, const Arg& x) {
  if (v.t->dim() != 1 || v.t->size(0) != x.t->size(-1))
    throw ShapeError(std::string(op) + ": " + detail::describe(v.name, *v.t) + " must be (" +
                     std::to_string(x.t->size(-1)) + ") to match the last dim of " +
                     detail::describe(x.name, *x.t));
}

// Host ids/targets: every value in [0, V) (or -1 when allowed); throws before any kernel runs.
void check_indices(const char* op, const char* what, const Tensor& idx, int64_t V, bool allow_ignore,
                   const Arg& against) {
  if (idx.device().type != DeviceType::cpu) return;
  const int32_t* p = static_cast<const int32_t*>(idx.raw_data());
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t v = p[ref::detail::elem_offset(idx, i)];
    if ((allow_ignore && v == -1) || (v >= 0 && v < V)) continue;
    throw ArgumentError(std::string(op) + ": " + what + " " + std::to_string(v) + " at position " +
                        std::to_string(i) + " is outside [0, " + std::to_string(V) + ")" +
                        (allow_ignore ? " (or -1 to ignore)" : "") + " for " +
                        detail::describe(against.name, *against.t));
  }
}
}  // namespace

void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &dout, &dx}));
  const char* op = "gelu_backward";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"dout", &dout}, {"dx", &dx}});
  detail::check_float(op, {{"x", &x}, {"dout", &dout}, {"dx", &dx}});
  detail::check_same_shape(op, {"dout", &dout}, {"x", &x});
  detail::check_same_shape(op, {"dx", &dx}, {"x", &x});
  ops::gelu_backward(dev, x, dout, dx);
}

void causal_softmax(const Tensor& x, float scale, Tensor& y) {
  ProfileScope prof(WorkKind::attention);
  prof.moves(detail::bytes_of({&x, &y}));
  const char* op = "causal_softmax";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"y", &y}});
  detail::check_float(op, {{"x", &x}, {"y", &y}});
  check_causal_shape(op, {"x", &x});
  detail::check_same_shape(op, {"y", &y}, {"x", &x});
  check_finite(op, "scale", scale);
  ops::causal_softmax(dev, x, scale, y);
}

void causal_softmax_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) {
  ProfileScope prof(WorkKind::attention);
  prof.moves(detail::bytes_of({&y, &dy, &dx}));
  const char* op = "causal_softmax_backward";
  const Device dev = detail::check_defined_same_device(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  detail::check_float(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  check_causal_shape(op, {"y", &y});
  detail::check_same_shape(op, {"dy", &dy}, {"y", &y});
  detail::check_same_shape(op, {"dx", &dx}, {"y", &y});
  check_finite(op, "scale", scale);
  ops::causal_softmax_backward(dev, y, dy, scale, dx);
}

void softmax_last_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  ProfileScope prof(WorkKind::attention);
  prof.moves(detail::bytes_of({&y, &dy, &dx}));
  const char* op = "softmax_last_backward";
  const Device dev = detail::check_defined_same_device(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  detail::check_float(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  detail::check_min_dim(op, {"y", &y}, 1);
  detail::check_same_shape(op, {"dy", &dy}, {"y", &y});
  detail::check_same_shape(op, {"dx", &dx}, {"y", &y});
  ops::softmax_last_backward(dev, y, dy, dx);
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dout, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  ProfileScope prof(WorkKind::normalization);
  prof.moves(detail::bytes_of({&x, &weight, &mean, &rstd, &dout, &dx, &dweight, &dbias}));
  const char* op = "layer_norm_backward";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x},
                                                            {"weight", &weight},
                                                            {"rstd", &rstd},
                                                            {"dout", &dout},
                                                            {"dx", &dx},
                                                            {"dweight", &dweight},
                                                            {"dbias", &dbias}});
  detail::check_float(op, {{"x", &x},
                           {"weight", &weight},
                           {"dout", &dout},
                           {"dx", &dx},
                           {"dweight", &dweight},
                           {"dbias", &dbias}});
  if (mean.defined()) {
    detail::check_defined_same_device(op, {{"x", &x}, {"mean", &mean}});
    detail::check_f32_or_f64(op, {"mean", &mean});
  }
  detail::check_f32_or_f64(op, {"rstd", &rstd});
  detail::check_min_dim(op, {"x", &x}, 1);
  detail::check_same_shape(op, {"dout", &dout}, {"x", &x});
  detail::check_same_shape(op, {"dx", &dx}, {"x", &x});
  check_row_vector(op, {"weight", &weight}, {"x", &x});
  check_row_vector(op, {"dweight", &dweight}, {"x", &x});
  check_row_vector(op, {"dbias", &dbias}, {"x", &x});
  for (const Arg& s : {Arg{"mean", &mean}, Arg{"rstd", &rstd}})
    if (s.t->defined() && !detail::is_per_row_shape(*s.t, x))
      throw ShapeError(std::string(op) + ": " + detail::describe(s.name, *s.t) +
                       " must have one element per row of " + detail::describe("x", x));
  ops::layer_norm_backward(dev, x, weight, mean, rstd, dout, dx, dweight, dbias);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  ProfileScope prof(WorkKind::elementwise);
  // dout read; the rows of dweight it adds to read and written (not the whole table)
  prof.moves(detail::bytes_of({&ids, &dout}) +
             2 * dout.numel() * static_cast<int64_t>(dtype_size(dweight.dtype())));
  const char* op = "embedding_backward";
  const Device dev =
      detail::check_defined_same_device(op, {{"ids", &ids}, {"dout", &dout}, {"dweight", &dweight}});
  detail::check_dtype(op, {"ids", &ids}, DType::i32);
  detail::check_float(op, {{"dout", &dout}, {"dweight", &dweight}});
  if (dweight.dim() != 2)
    throw ShapeError(std::string(op) + ": " + detail::describe("dweight", dweight) + " must be (V, C)");
  const int64_t C = dweight.size(1), R = ids.numel();
  // dout is (R, C), or ids' shape followed by C (as embedding's out).
  Shape by_ids = ids.shape();
  bool ok = dout.dim() == 2 && dout.size(0) == R && dout.size(1) == C;
  if (!ok && ids.dim() < kMaxDims) {
    by_ids.push_back(C);
    ok = dout.shape() == by_ids;
  }
  if (!ok)
    throw ShapeError(std::string(op) + ": dout " + dout.to_string() + " must be (" + std::to_string(R) +
                     ", " + std::to_string(C) + ") for ids " + ids.to_string() + " and dweight " +
                     dweight.to_string());
  check_indices(op, "id", ids, dweight.size(0), false, {"dweight", &dweight});
  ops::embedding_backward(dev, ids, dout, dweight);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float dloss, Tensor& dlogits) {
  ProfileScope prof(WorkKind::loss);
  prof.moves(detail::bytes_of({&logits, &targets, &dlogits}));
  const char* op = "cross_entropy_backward";
  const Device dev = detail::check_defined_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"dlogits", &dlogits}});
  detail::check_float(op, {{"logits", &logits}});
  detail::check_dtype(op, {"targets", &targets}, DType::i32);
  const DType dt = dlogits.dtype();
  const bool f64 = logits.dtype() == DType::f64;
  if (!(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16 || (f64 && dt == DType::f64)))
    throw DTypeError(std::string(op) + ": " + detail::describe("dlogits", dlogits) +
                     " must be f32, bf16 or f16" + (f64 ? " (or f64)" : ""));
  detail::check_min_dim(op, {"logits", &logits}, 1);
  detail::check_same_shape(op, {"dlogits", &dlogits}, {"logits", &logits});
  if (!detail::is_per_row_shape(targets, logits))
    throw ShapeError(std::string(op) + ": targets " + targets.to_string() +
                     " must have one element per row of logits " + logits.to_string());
  check_finite(op, "dloss", dloss);
  check_indices(op, "target", targets, logits.size(-1), true, {"logits", &logits});
  ops::cross_entropy_backward(dev, logits, targets, dloss, dlogits);
}

void sum_to_row_accumulate(const Tensor& x, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&x, &out}));
  const char* op = "sum_to_row_accumulate";
  const Device dev = detail::check_defined_same_device(op, {{"x", &x}, {"out", &out}});
  detail::check_float(op, {{"x", &x}, {"out", &out}});
  detail::check_min_dim(op, {"x", &x}, 1);
  check_row_vector(op, {"out", &out}, {"x", &x});
  ops::sum_to_row_accumulate(dev, x, out);
}

void add_inplace(Tensor& acc, const Tensor& x) {
  ProfileScope prof(WorkKind::elementwise);
  prof.moves(detail::bytes_of({&acc, &acc, &x}));  // acc read and written
  const char* op = "add_inplace";
  const Device dev = detail::check_defined_same_device(op, {{"acc", &acc}, {"x", &x}});
  detail::check_float(op, {{"acc", &acc}, {"x", &x}});
  detail::check_same_shape(op, {"x", &x}, {"acc", &acc});
  ops::add_inplace(dev, acc, x);
}

}  // namespace mixtrain
