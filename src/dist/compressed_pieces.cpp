// The compressed pieces (dist/compressed_pieces.h): one plain loop each, the reference and the
// implementation (a piece is quantized once per step or per gather, next to GEMM-bound passes).
#include "dist/compressed_pieces.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mixtrain/numeric/fp8.h"

namespace mixtrain::dist {

namespace {
int64_t blocks_of(int64_t n) { return (n + kPieceBlock - 1) / kPieceBlock; }
float code_max(PieceCode c) { return c == PieceCode::int8 ? 127.f : 448.f; }
// The code of u = v / scale (|u| <= code_max, up to rounding), as its byte.
uint8_t encode(PieceCode c, float u) {
  if (c == PieceCode::int8)  // std::nearbyint rounds half to even in the default rounding mode
    return static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(u), -127.f, 127.f)));
  return fp8_e4m3_from_f32(u, Fp8Overflow::saturate).bits();
}
float decode(PieceCode c, uint8_t byte) {
  if (c == PieceCode::int8) return static_cast<float>(static_cast<int8_t>(byte));
  return f32_from_fp8_e4m3(fp8_e4m3::from_bits(byte));
}

// v(i): the i-th value to quantize (the residual already added).
template <class Value>
void quantize_values(PieceCode code, const Value& v, float* residual, int64_t n, float loss_scale,
                     char* out) {
  float* scales = reinterpret_cast<float*>(out);  // out is 4-byte aligned (a tensor's storage)
  auto* codes = reinterpret_cast<uint8_t*>(out + 4 * blocks_of(n));
  std::memset(codes, 0, static_cast<size_t>((n + 3) / 4 * 4));
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const int64_t begin = b * kPieceBlock, end = std::min(n, begin + kPieceBlock);
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
    const float scale = absmax / code_max(code);
    scales[b] = scale;
    for (int64_t i = begin; i < end; ++i) {
      const float vi = v(i);
      codes[i] = scale > 0.f ? encode(code, vi / scale) : 0;
      if (residual) residual[i] = (vi - decode(code, codes[i]) * scale) / loss_scale;
    }
  }
}
}  // namespace

int64_t piece_bytes(int64_t n) { return 4 * blocks_of(n) + (n + 3) / 4 * 4; }

void quantize_piece(PieceCode code, const float* x, float* residual, int64_t n, float loss_scale, char* out) {
  if (residual)
    quantize_values(
        code, [&](int64_t i) { return x[i] + residual[i] * loss_scale; }, residual, n, loss_scale, out);
  else
    quantize_values(
        code, [&](int64_t i) { return x[i]; }, nullptr, n, 1.f, out);
}

void quantize_piece(PieceCode code, const bf16* x, int64_t n, char* out) {
  quantize_values(
      code, [&](int64_t i) { return f32_from_bf16(x[i]); }, nullptr, n, 1.f, out);
}

void quantize_piece(PieceCode code, const fp16* x, int64_t n, char* out) {
  quantize_values(
      code, [&](int64_t i) { return f32_from_fp16(x[i]); }, nullptr, n, 1.f, out);
}

void add_dequantized_piece(PieceCode code, const char* in, int64_t n, float* acc) {
  const float* scales = reinterpret_cast<const float*>(in);
  const auto* codes = reinterpret_cast<const uint8_t*>(in + 4 * blocks_of(n));
  for (int64_t i = 0; i < n; ++i) acc[i] += decode(code, codes[i]) * scales[i / kPieceBlock];
}

void dequantize_piece(PieceCode code, const char* in, int64_t n, int64_t begin, int64_t end, float* out) {
  const float* scales = reinterpret_cast<const float*>(in);
  const auto* codes = reinterpret_cast<const uint8_t*>(in + 4 * blocks_of(n));
  for (int64_t i = begin; i < end; ++i) out[i - begin] = decode(code, codes[i]) * scales[i / kPieceBlock];
}

}  // namespace mixtrain::dist
