// Scalar reference of the embedding lookup: out[r, :] = weight[ids[r], :], one element at a time
// (values pass through the compute type, so each is rounded once, to out's dtype).
#include <string>

#include "kernels/ref/ref_util.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/ops.h"

namespace mixtrain::ref {
namespace {
template <typename T>
void embedding_t(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const int64_t V = weight.size(0), C = weight.size(1), R = ids.numel();
  const int32_t* id = static_cast<const int32_t*>(ids.raw_data());
  const int64_t os = detail::last_stride(out);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t v = id[detail::elem_offset(ids, r)];
    if (v < 0 || v >= V)
      throw ArgumentError("embedding: id " + std::to_string(v) + " at position " + std::to_string(r) +
                          " is outside [0, " + std::to_string(V) + ")");
    const int64_t ob = detail::row_offset(out, r);
    for (int64_t c = 0; c < C; ++c)
      detail::store<T>(out, ob + c * os,
                       detail::load<T>(weight, v * weight.stride(0) + c * weight.stride(1)));
  }
}
}  // namespace

void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  if (detail::any_f64({&weight, &out}))
    embedding_t<double>(weight, ids, out);
  else
    embedding_t<float>(weight, ids, out);
}

}  // namespace mixtrain::ref
