// Fast CPU embedding lookup (cpu::embedding): one row copy per id (memcpy when weight and
// out share a dtype, else one bulk conversion), rows split over threads.
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_rows.h"
#include "mixtrain/core/cpu_features.h"

namespace mixtrain {
namespace cpu {
namespace {
// Checks every id before any thread starts (an exception cannot leave an OpenMP region).
void check_ids(const int32_t* id, int64_t R, int64_t V) {
  for (int64_t r = 0; r < R; ++r)
    if (id[r] < 0 || id[r] >= V)
      throw ArgumentError("embedding: id " + std::to_string(id[r]) + " at position " + std::to_string(r) +
                          " is outside [0, " + std::to_string(V) + ")");
}
}  // namespace
}  // namespace cpu

void cpu::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  if (force_reference() || !cpu::fast_dtype(weight.dtype()) || !cpu::fast_dtype(out.dtype()))
    return ref::embedding(weight, ids, out);
  cpu::RowView wv, ov;
  const Tensor wk = cpu::rows_or_copy(weight, wv);
  const Tensor idk = ids.contiguous();
  Tensor o = cpu::rows_for_output(out, ov);
  const int32_t* id = static_cast<const int32_t*>(idk.raw_data());
  const int64_t R = idk.numel(), V = wv.rows, C = wv.cols;
  cpu::check_ids(id, R, V);
  const bool same = wv.dtype == ov.dtype;
  const int nt = cpu::threads_for(R * C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t r = 0; r < R; ++r) {
    if (same)
      std::memcpy(ov.row(r), wv.row(id[r]), static_cast<size_t>(C) * dtype_size(ov.dtype));
    else
      convert_any(wv.row(id[r]), wv.dtype, ov.row(r), ov.dtype, static_cast<size_t>(C));
  }
  cpu::finish_output(o, out);
}

}  // namespace mixtrain
