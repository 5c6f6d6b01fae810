// The compressed reduce-scatter's pieces (dist/int8_pieces.h): one plain loop each, the reference
// and the implementation (a piece is quantized once per step, next to a GEMM-bound backward).
#include "dist/int8_pieces.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mixtrain::dist {

namespace {
int64_t blocks_of(int64_t n) { return (n + kInt8PieceBlock - 1) / kInt8PieceBlock; }
}  // namespace

int64_t int8_piece_bytes(int64_t n) { return 4 * blocks_of(n) + (n + 3) / 4 * 4; }

void quantize_piece_int8(const float* x, float* residual, int64_t n, float loss_scale, char* out) {
  float* scales = reinterpret_cast<float*>(out);  // out is 4-byte aligned (a tensor's storage)
  auto* codes = reinterpret_cast<int8_t*>(out + 4 * blocks_of(n));
  std::memset(codes, 0, static_cast<size_t>((n + 3) / 4 * 4));
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const int64_t begin = b * kInt8PieceBlock, end = std::min(n, begin + kInt8PieceBlock);
    const auto v = [&](int64_t i) { return residual ? x[i] + residual[i] * loss_scale : x[i]; };
    float absmax = 0.f;
    bool finite = true;
    for (int64_t i = begin; i < end; ++i) {
      const float a = std::fabs(v(i));
      finite = finite && std::isfinite(a);
      absmax = std::max(absmax, a);
    }
    if (!finite) {
      scales[b] = NAN;
      continue;  // codes 0, residual kept
    }
    const float scale = absmax / 127.f;
    scales[b] = scale;
    for (int64_t i = begin; i < end; ++i) {
      const float vi = v(i);
      // std::nearbyint rounds half to even in the default rounding mode.
      const float q = scale > 0.f ? std::clamp(std::nearbyint(vi / scale), -127.f, 127.f) : 0.f;
      codes[i] = static_cast<int8_t>(q);
      if (residual) residual[i] = (vi - q * scale) / loss_scale;
    }
  }
}

void add_dequantized_piece_int8(const char* in, int64_t n, float* acc) {
  const float* scales = reinterpret_cast<const float*>(in);
  const auto* codes = reinterpret_cast<const int8_t*>(in + 4 * blocks_of(n));
  for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<float>(codes[i]) * scales[i / kInt8PieceBlock];
}

}  // namespace mixtrain::dist
