// The optimizer kernels' shared pieces (kernels/optimizer_kernels.h): update-rounding names, the
// work split of the flat arena, the working-copy writer (the 16-bit writes' checks:
// kernels/cpu/lowp_span.cpp).
#include "mixtrain/kernels/optimizer_kernels.h"

#include <algorithm>
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain {

UpdateRounding parse_update_rounding(std::string_view s) {
  if (s == "nearest") return UpdateRounding::nearest;
  if (s == "stochastic") return UpdateRounding::stochastic;
  if (s == "kahan") return UpdateRounding::kahan;
  if (s == "master") return UpdateRounding::master;
  throw ArgumentError("unknown update rounding '" + std::string(s) +
                      "' (valid: nearest, stochastic, kahan, master)");
}

std::string_view update_rounding_name(UpdateRounding r) {
  switch (r) {
    case UpdateRounding::nearest:
      return "nearest";
    case UpdateRounding::stochastic:
      return "stochastic";
    case UpdateRounding::kahan:
      return "kahan";
    case UpdateRounding::master:
      return "master";
  }
  return "?";
}

std::vector<FlatSpan> split_spans(const std::vector<FlatSpan>& spans, int64_t max_numel) {
  if (max_numel < 1)
    throw ArgumentError("split_spans: max_numel must be >= 1, got " + std::to_string(max_numel));
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

}  // namespace mixtrain
