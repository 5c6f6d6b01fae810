// The optimizer state below fp32 (kernels/state_kernels.h): names, bitsandbytes' dynamic maps,
// the code of a scaled value, the spans of a shard, and decoding.
#include "mixtrain/kernels/state_kernels.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {

StatePrecision parse_state_precision(std::string_view s) {
  if (s == "fp32") return StatePrecision::fp32;
  if (s == "bf16") return StatePrecision::bf16;
  if (s == "int8") return StatePrecision::int8;
  throw ArgumentError("unknown optimizer state precision '" + std::string(s) + "' (valid: fp32, bf16, int8)");
}

std::string_view state_precision_name(StatePrecision p) {
  switch (p) {
    case StatePrecision::fp32:
      return "fp32";
    case StatePrecision::bf16:
      return "bf16";
    case StatePrecision::int8:
      return "int8";
  }
  return "?";
}

uint64_t state_seed(uint64_t seed, int j) {
  // Fixed, distinct offsets into splitmix64's sequence of seeds ("optstat0", "optstat1").
  return detail::splitmix64_mix(seed ^ (0x6f70747374617430ull + uint64_t(j)));
}

namespace {

// torch.linspace(0.1, 1, steps, dtype=torch.float32) as PyTorch 2.x computes it on the CPU
// (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp): step = (1 - 0.1) / (steps - 1) in fp32;
// element i = start + step * i below steps / 2, end - step * (steps - i - 1) from there; the
// vectorised loop (pairs of `lanes`-wide vectors) takes each vector's first element so and the
// rest as base + k * step (Vectorized::arange), the remainder the scalar formula.
std::vector<float> torch_linspace(int64_t steps, int lanes) {
  const float start = 0.1f, end = 1.0f;
  const float step = (end - start) / float(steps - 1);
  const int64_t halfway = steps / 2;
  auto scalar = [&](int64_t i) {
    return i < halfway ? start + step * float(i) : end - step * float(steps - i - 1);
  };
  std::vector<float> out(static_cast<size_t>(steps));
  int64_t i = 0;
  if (lanes > 0)
    for (; i + 2 * lanes <= steps; i += lanes) {
      const float base = scalar(i);
      for (int k = 0; k < lanes; ++k) out[size_t(i + k)] = k == 0 ? base : base + float(k) * step;
    }
  for (; i < steps; ++i) out[size_t(i)] = scalar(i);
  return out;
}

// create_dynamic_map(signed, 7, 8) of bitsandbytes/functional.py: for exponent i = 0..6 the
// means of linspace(0.1, 1, fraction_items) scaled by 10^(i - 6) (a Python float times an fp32
// tensor: an fp32 product), with their negatives when signed; then 0 and 1; sorted.
DynamicMap make_map(bool is_signed, int lanes) {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const int64_t items = is_signed ? (int64_t{1} << i) + 1 : (int64_t{1} << (i + 1)) + 1;
    const std::vector<float> b = torch_linspace(items, lanes);
    const float scale = i == 6 ? 1.0f : float(std::pow(10.0, double(i - 6)));
    std::vector<float> means;
    for (size_t k = 0; k + 1 < b.size(); ++k) means.push_back((b[k] + b[k + 1]) / 2.0f);
    for (float m : means) data.push_back(scale * m);
    if (is_signed)
      for (float m : means) data.push_back(-scale * m);
  }
  data.push_back(0.f);
  data.push_back(1.f);
  if (data.size() != 256) throw Error("dynamic map: " + std::to_string(data.size()) + " values");
  std::sort(data.begin(), data.end());
  DynamicMap m{};
  for (size_t k = 0; k < 256; ++k) m.value[k] = data[k];
  for (size_t k = 0; k < 255; ++k) {
    if (!(m.value[k] < m.value[k + 1])) throw Error("dynamic map: values not strictly ascending");
    const double mid = (double(m.value[k]) + double(m.value[k + 1])) / 2.0;  // exact: both are floats
    m.midpoint[k] = mid;
    // The largest float <= mid: s > mid <=> s > below for floats s (mid a float: itself).
    float f = float(mid);
    if (double(f) > mid) f = std::nextafter(f, -INFINITY);
    m.below[k] = f;
  }
  m.zero_code = uint8_t(std::find(m.value.begin(), m.value.end(), 0.f) - m.value.begin());
  return m;
}

// The map is built with linspace's scalar formula (lanes 0). PyTorch's own map depends on the CPU
// it runs on: its vectorised loop (8 lanes with AVX2, 16 with AVX-512, for linspaces of at least
// 16 / 32 points) forms base + k * step, which can differ from start + step * i in the last bit.
// Not checked against torch here (the dev venv has no working torch this session): a value off
// by an ulp moves a threshold by half an ulp, nothing a training run can see.
constexpr int kTorchLanes = 0;

}  // namespace

const DynamicMap& dynamic_map(bool is_signed) {
  static const DynamicMap s = make_map(true, kTorchLanes), u = make_map(false, kTorchLanes);
  return is_signed ? s : u;
}

uint8_t dynamic_code_ref(const DynamicMap& map, float s) {
  int n = 0;
  for (double t : map.midpoint) n += double(s) > t;
  return uint8_t(n);
}

std::vector<StateSpan> state_spans(const std::vector<FlatSpan>& whole, int64_t begin, int64_t end,
                                   StatePrecision p) {
  // An empty shard (a rank past the arena's end: zero_partition clamps it there) holds no block.
  if (begin < end && begin % kInt8StateBlock != 0)
    throw ArgumentError("state_spans: the shard must start on the 256-element grid, got " +
                        std::to_string(begin));
  std::vector<StateSpan> out;
  int64_t fallback = 0, blocks = 0;
  for (const FlatSpan& s : whole) {
    const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, end);
    if (lo >= hi) continue;
    StateSpan st;
    st.span = {lo - begin, hi - lo, s.decay};
    st.quantized = p == StatePrecision::int8 && s.numel >= kInt8StateMinNumel;
    st.fallback_offset = p == StatePrecision::int8 ? (st.quantized ? 0 : fallback) : st.span.offset;
    st.block_offset = st.quantized ? blocks : 0;
    if (p == StatePrecision::int8 && !st.quantized) fallback += st.span.numel;
    if (st.quantized) blocks += grid_cells(st.span.offset, st.span.numel);
    out.push_back(st);
  }
  return out;
}

int64_t fallback_numel(const std::vector<StateSpan>& spans) {
  int64_t n = 0;
  for (const StateSpan& s : spans)
    if (!s.quantized) n += s.span.numel;
  return n;
}

int64_t state_blocks(const std::vector<StateSpan>& spans) {
  int64_t n = 0;
  for (const StateSpan& s : spans)
    if (s.quantized) n += grid_cells(s.span.offset, s.span.numel);
  return n;
}

void decode_state(const MomentBuf& b, const std::vector<StateSpan>& spans, float* out) {
  for (const StateSpan& st : spans) {
    const FlatSpan& sp = st.span;
    float* o = out + sp.offset;
    switch (b.precision) {
      case StatePrecision::fp32:
        std::copy(b.f32 + sp.offset, b.f32 + sp.offset + sp.numel, o);
        break;
      case StatePrecision::bf16:
        convert_bf16_to_f32(b.b16 + sp.offset, o, size_t(sp.numel));
        break;
      case StatePrecision::int8:
        if (!st.quantized) {
          std::copy(b.f32 + st.fallback_offset, b.f32 + st.fallback_offset + sp.numel, o);
          break;
        }
        for (int64_t i = 0; i < sp.numel; ++i) {
          const int64_t e = sp.offset + i;
          const int64_t blk = st.block_offset + e / kInt8StateBlock - sp.offset / kInt8StateBlock;
          o[i] = dynamic_map(b.is_signed).value[b.codes[e]] * b.absmax[blk];
        }
        break;
    }
  }
}

}  // namespace mixtrain
