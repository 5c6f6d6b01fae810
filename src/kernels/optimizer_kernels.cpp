// The optimizer kernels' shared pieces (kernels/optimizer_kernels.h): update-rounding names, the
// work split of the flat arena, the working-copy writer, the Kahan-buffer check.
#include "mixtrain/kernels/optimizer_kernels.h"

#include <algorithm>
#include <string>

#include "kernels/cpu/lowp_span.h"
#include "mixtrain/core/error.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain {

UpdateRounding parse_update_rounding(std::string_view s) {
  if (s == "nearest") return UpdateRounding::nearest;
  if (s == "stochastic") return UpdateRounding::stochastic;
  if (s == "kahan") return UpdateRounding::kahan;
  if (s == "master") return UpdateRounding::master;
  throw ArgumentError("unknown update rounding '" + std::string(s) + "' (valid: nearest, stochastic, kahan, master)");
}

std::string_view update_rounding_name(UpdateRounding r) {
  switch (r) {
    case UpdateRounding::nearest: return "nearest";
    case UpdateRounding::stochastic: return "stochastic";
    case UpdateRounding::kahan: return "kahan";
    case UpdateRounding::master: return "master";
  }
  return "?";
}

std::vector<FlatSpan> split_spans(const std::vector<FlatSpan>& spans, int64_t max_numel) {
  if (max_numel < 1) throw ArgumentError("split_spans: max_numel must be >= 1, got " + std::to_string(max_numel));
  std::vector<FlatSpan> out;
  for (const FlatSpan& s : spans)
    for (int64_t i = 0; i < s.numel; i += max_numel)
      out.push_back({s.offset + i, std::min(max_numel, s.numel - i), s.decay});
  return out;
}

void write_working_copy(const float* p, const WorkingCopyOut& w, int64_t offset, int64_t n) {
  const int64_t lo = std::max(offset, w.begin), end = offset + n;
  if (!w || lo >= end) return;
  const size_t count = static_cast<size_t>(end - lo);
  if (w.dtype == DType::bf16)
    convert_f32_to_bf16(p + lo, static_cast<bf16*>(w.data) + (lo - w.begin), count);
  else
    convert_f32_to_fp16(p + lo, static_cast<fp16*>(w.data) + (lo - w.begin), count);
}

namespace optim_detail {

void check_lowp_write(const void* c, const LowpWrite& w, const char* op) {
  if (w.rounding == UpdateRounding::kahan && c == nullptr)
    throw ArgumentError(std::string(op) + ": kahan rounding needs a compensation buffer");
  if (w.rounding == UpdateRounding::master)
    throw ArgumentError(std::string(op) + ": master rounding updates fp32 master weights (the fp32 kernel with 16-bit "
                        "gradients), not the 16-bit parameters in place");
}

void check_master_out(const WorkingCopyOut& working, DType grad_dtype, const char* op) {
  if (!working || working.begin != 0)
    throw ArgumentError(std::string(op) + ": fp32 master weights with 16-bit gradients need the 16-bit parameters "
                        "to write (the working copy), all of them");
  if (working.dtype != grad_dtype)
    throw DTypeError(std::string(op) + ": the 16-bit parameters are " + std::string(dtype_name(working.dtype)) +
                     ", the gradients " + std::string(dtype_name(grad_dtype)));
}

}  // namespace optim_detail

}  // namespace mixtrain
