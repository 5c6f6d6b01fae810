// Argument checks shared by the public ops (kernels/*_ops.cpp): each throws the typed error of
// core/error.h with a one-line message that names the op and the offending tensors, e.g.
// "layer_norm: weight f32(7) does not match x bf16(4, 8) last dim 8".
#pragma once
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::detail {

// A named tensor argument, for messages.
struct Arg {
  const char* name;
  const Tensor* t;
};

inline std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + t.to_string();
}

// Every argument defined, and all on one device (the first one's). Returns that device.
inline Device check_defined_same_device(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args)
    if (!a.t->defined()) throw ArgumentError(std::string(op) + ": " + a.name + " is undefined");
  const Arg& first = *args.begin();
  for (const Arg& a : args)
    if (!(a.t->device() == first.t->device()))
      throw ArgumentError(std::string(op) + ": " + describe(a.name, *a.t) + " is on " +
                          a.t->device().to_string() + " but " + describe(first.name, *first.t) + " is on " +
                          first.t->device().to_string());
  return first.t->device();
}

// The op computes in floating point: i32 (token ids) is not accepted here.
inline void check_float(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args)
    if (!is_floating(a.t->dtype()))
      throw DTypeError(std::string(op) + ": " + describe(a.name, *a.t) + " must be a float tensor");
}

inline void check_dtype(const char* op, const Arg& a, DType expected) {
  if (a.t->dtype() != expected)
    throw DTypeError(std::string(op) + ": " + describe(a.name, *a.t) + " must be " +
                     std::string(dtype_name(expected)));
}

// Statistics outputs (layer_norm mean/rstd, per-row losses): f32, or f64 for gradient checks.
inline void check_f32_or_f64(const char* op, const Arg& a) {
  if (a.t->dtype() != DType::f32 && a.t->dtype() != DType::f64)
    throw DTypeError(std::string(op) + ": " + describe(a.name, *a.t) + " must be f32 (or f64)");
}

inline void check_same_shape(const char* op, const Arg& a, const Arg& like) {
  if (!(a.t->shape() == like.t->shape()))
    throw ShapeError(std::string(op) + ": " + describe(a.name, *a.t) + " does not match " +
                     describe(like.name, *like.t));
}

inline void check_min_dim(const char* op, const Arg& a, int min_dim) {
  if (a.t->dim() < min_dim)
    throw ShapeError(std::string(op) + ": " + describe(a.name, *a.t) + " needs at least " +
                     std::to_string(min_dim) + " dim" + (min_dim > 1 ? "s" : ""));
}

// The bytes an op moves for the profiler (core/profiler.h, ProfileScope::moves): each tensor's
// size, every input read once and every output written once; null and undefined ones count 0.
inline int64_t bytes_of(std::initializer_list<const Tensor*> ts) {
  int64_t n = 0;
  for (const Tensor* t : ts)
    if (t && t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n;
}
inline int64_t bytes_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts)
    if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

// x (..., C) -> its leading shape (...).
inline Shape leading_shape(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 1); }

// A per-row tensor (mean, rstd, targets, losses) for x (..., C): either the leading shape (...)
// or the flat (R).
inline bool is_per_row_shape(const Tensor& t, const Tensor& x) {
  const Shape lead = leading_shape(x);
  if (t.shape() == lead) return true;
  return t.dim() == 1 && t.size(0) == lead.numel();
}

// A table lookup's out (R, C) or ids' shape followed by C, for table (V, C) and ids (any shape), and
// (host ids) every id in [0, V): ShapeError / ArgumentError naming the id and its position
// (embedding_ops.cpp; the embedding and the quantized table's lookup).
void check_table_lookup(const char* op, const char* table_name, const Tensor& table, const Tensor& ids,
                        const Tensor& out, Device dev);

}  // namespace mixtrain::detail
