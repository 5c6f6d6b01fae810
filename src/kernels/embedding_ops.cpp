// Public embedding lookup: argument checks (including every id against the vocabulary), then the
// device's backend.
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"
#include "kernels/op.h"
#include "kernels/op_checks.h"
#include "kernels/ref/ref_util.h"
#include "mixtrain/core/profiler.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain {
namespace ops {
const Op<void(const Tensor&, const Tensor&, Tensor&)> embedding{"embedding", ref::embedding, cpu::embedding,
                                                                meta::embedding};
}  // namespace ops

namespace detail {
void check_table_lookup(const char* op, const char* table_name, const Tensor& table, const Tensor& ids,
                        const Tensor& out, Device dev) {
  const int64_t V = table.size(0), C = table.size(1), R = ids.numel();
  // out is (R, C), or ids' shape followed by C.
  Shape by_ids = ids.shape();
  const bool ok_flat = out.dim() == 2 && out.size(0) == R && out.size(1) == C;
  bool ok_ids = false;
  if (ids.dim() < kMaxDims) {
    by_ids.push_back(C);
    ok_ids = out.shape() == by_ids;
  }
  if (!ok_flat && !ok_ids)
    throw ShapeError(std::string(op) + ": out " + out.to_string() + " must be (" + std::to_string(R) + ", " +
                     std::to_string(C) + ") for ids " + ids.to_string() + " and " + table_name + " " +
                     table.to_string());
  if (dev.type == DeviceType::cpu) {  // the ids are host data: check them here, before any kernel
    const int32_t* id = static_cast<const int32_t*>(ids.raw_data());
    for (int64_t r = 0; r < R; ++r) {
      const int32_t v = id[ref::detail::elem_offset(ids, r)];
      if (v < 0 || v >= V)
        throw ArgumentError(std::string(op) + ": id " + std::to_string(v) + " at position " +
                            std::to_string(r) + " is outside [0, " + std::to_string(V) + ") for " +
                            table_name + " " + table.to_string());
    }
  }
}
}  // namespace detail

void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  ProfileScope prof(WorkKind::elementwise);
  // The rows looked up (out's size in weight's dtype), not the whole table.
  prof.moves(detail::bytes_of({&ids, &out}) + out.numel() * static_cast<int64_t>(dtype_size(weight.dtype())));
  const char* op = "embedding";
  const Device dev =
      detail::check_defined_same_device(op, {{"weight", &weight}, {"ids", &ids}, {"out", &out}});
  detail::check_float(op, {{"weight", &weight}, {"out", &out}});
  detail::check_dtype(op, {"ids", &ids}, DType::i32);
  if (weight.dim() != 2)
    throw ShapeError(std::string(op) + ": weight " + weight.to_string() + " must be (V, C)");
  detail::check_table_lookup(op, "weight", weight, ids, out, dev);
  ops::embedding(dev, weight, ids, out);
}

}  // namespace mixtrain
