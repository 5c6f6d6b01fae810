// The compressed pieces' wire format (dist/compressed_pieces.h) against its definition:
// blockwise symmetric int8, scale = max|v| / 127, codes rounded half to even, a non-finite block
// poisoned with a NaN scale, and error feedback that keeps exactly what the codes miss (unscaled);
// 16-bit sources (ZeRO-3's gathers of the working copy) quantized as their fp32 values, and the
// dequantization of any sub-range.
#include "dist/compressed_pieces.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "mixtrain/numeric/fp8.h"

namespace mixtrain::dist {
namespace {

std::vector<float> dequantized(const std::vector<char>& wire, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), 0.f);
  add_dequantized_piece(PieceCode::int8, wire.data(), n, out.data());
  return out;
}

TEST(Int8Pieces, BytesAreScalesThenCodes) {
  EXPECT_EQ(piece_bytes(0), 0);
  EXPECT_EQ(piece_bytes(1), 4 + 4);
  EXPECT_EQ(piece_bytes(2048), 4 + 2048);
  EXPECT_EQ(piece_bytes(2049), 8 + 2052);
  // A quarter of fp32's bytes, plus a scale per 2048 elements.
  EXPECT_NEAR(double(piece_bytes(1 << 20)) / (4 << 20), 0.25 + 1.0 / 2048, 1e-9);
}

TEST(Int8Pieces, QuantizesByTheDefinitionBlockByBlock) {
  // Block 0: 2048 values with absmax 12.7 (scale 0.1 in fp32); block 1: 5 values, absmax 2.54.
  const int64_t n = 2048 + 5;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < 2048; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i % 255) - 127) * 0.1f;
  const float tail[5] = {2.54f, -1.27f, 0.0f, 0.01f, -2.0f};
  std::memcpy(x.data() + 2048, tail, sizeof tail);
  std::vector<char> wire(static_cast<size_t>(piece_bytes(n)));
  quantize_piece(PieceCode::int8, x.data(), nullptr, n, 1.f, wire.data());
  const float* scales = reinterpret_cast<const float*>(wire.data());
  const auto* codes = reinterpret_cast<const int8_t*>(wire.data() + 8);
  for (int b = 0; b < 2; ++b) {
    const int64_t begin = b * 2048, end = b == 0 ? 2048 : n;
    float absmax = 0;
    for (int64_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(x[static_cast<size_t>(i)]));
    EXPECT_EQ(scales[b], absmax / 127.f) << "block " << b;
    for (int64_t i = begin; i < end; ++i) {
      const float want = std::nearbyint(x[static_cast<size_t>(i)] / scales[b]);
      ASSERT_EQ(codes[i], static_cast<int8_t>(want)) << "element " << i;
    }
  }
  EXPECT_EQ(codes[2048], 127);      // the block's absmax
  EXPECT_EQ(codes[2048 + 1], -64);  // -1.27 / 0.02 = -63.5: half to even
  EXPECT_EQ(codes[2048 + 2], 0);
  EXPECT_EQ(codes[2048 + 3], 0);  // 0.01 / 0.02 = 0.5: half to even
  const std::vector<float> back = dequantized(wire, n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(back[static_cast<size_t>(i)], static_cast<float>(codes[i]) * scales[i / 2048]) << i;
}

TEST(Int8Pieces, ZerosAndNonFiniteBlocks) {
  std::vector<float> x(4096, 0.f);
  x[3000] = INFINITY;
  x[10] = 0.f;
  std::vector<float> residual(4096, 0.25f);
  std::vector<char> wire(static_cast<size_t>(piece_bytes(4096)));
  quantize_piece(PieceCode::int8, x.data(), residual.data(), 4096, 1.f, wire.data());
  const float* scales = reinterpret_cast<const float*>(wire.data());
  EXPECT_EQ(scales[0], 0.25f / 127.f);  // all residual: the carried error is sent
  EXPECT_TRUE(std::isnan(scales[1])) << "a block with inf must arrive non-finite";
  const std::vector<float> back = dequantized(wire, 4096);
  EXPECT_TRUE(std::isnan(back[2048]) && std::isnan(back[4095]));
  EXPECT_EQ(residual[3000], 0.25f) << "a non-finite block keeps its residual";
  EXPECT_EQ(residual[0], 0.f);  // 0.25 is the block's absmax: sent exactly
  // All zeros: scale 0, codes 0, values 0.
  std::vector<float> z(7, 0.f);
  std::vector<char> wz(static_cast<size_t>(piece_bytes(7)));
  quantize_piece(PieceCode::int8, z.data(), nullptr, 7, 1.f, wz.data());
  for (float v : dequantized(wz, 7)) EXPECT_EQ(v, 0.f);
}

// Error feedback: the residual is what the codes missed, in unscaled units; summed over steps,
// what was sent plus the residual left is what was given, so nothing is lost but the last residual.
TEST(Int8Pieces, ErrorFeedbackCarriesWhatTheCodesMiss) {
  const int64_t n = 3000;
  std::vector<float> residual(static_cast<size_t>(n), 0.f);
  std::vector<double> given(static_cast<size_t>(n), 0.0), sent(static_cast<size_t>(n), 0.0);
  std::vector<char> wire(static_cast<size_t>(piece_bytes(n)));
  for (int step = 0; step < 20; ++step) {
    const float scale = step < 10 ? 1024.f : 512.f;  // the loss scale halves half-way
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float g = std::sin(0.37f * float(i) + float(step)) * (i % 7 == 0 ? 3.f : 0.01f);
      x[static_cast<size_t>(i)] = g * scale;  // scaled as backward makes it
      given[static_cast<size_t>(i)] += g;
    }
    const std::vector<float> before = residual;
    quantize_piece(PieceCode::int8, x.data(), residual.data(), n, scale, wire.data());
    const std::vector<float> back = dequantized(wire, n);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      // The definition: v = x + e * S; e' = (v - value) / S.
      const float v = x[k] + before[k] * scale;
      ASSERT_EQ(residual[k], (v - back[k]) / scale) << "step " << step << " element " << i;
      sent[k] += double(back[k]) / scale;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    EXPECT_NEAR(sent[k] + residual[k], given[k], 1e-4) << i;
  }
}

// fp8 pieces: E4M3 codes of v / scale, scale = max|v| / 448, rounded to nearest even (the format's
// own conversion, numeric/fp8.h), values code * scale; the residual is what they miss.
TEST(Fp8Pieces, QuantizesByTheDefinitionWithErrorFeedback) {
  const int64_t n = 2048 + 3;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 3.f;
  x[100] = -4.f;  // block 0's absmax
  std::vector<float> residual(static_cast<size_t>(n), 0.f);
  residual[5] = 0.5f;  // carried from a step with loss scale 2: adds 1.0 to x[5]
  std::vector<char> wire(static_cast<size_t>(piece_bytes(n)));
  quantize_piece(PieceCode::fp8_e4m3, x.data(), residual.data(), n, 2.f, wire.data());
  const float* scales = reinterpret_cast<const float*>(wire.data());
  const auto* codes = reinterpret_cast<const uint8_t*>(wire.data() + 8);
  EXPECT_EQ(scales[0], 4.f / 448.f);
  std::vector<float> back(static_cast<size_t>(n), 0.f);
  add_dequantized_piece(PieceCode::fp8_e4m3, wire.data(), n, back.data());
  size_t inexact = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[static_cast<size_t>(i)] + (i == 5 ? 1.f : 0.f);
    const float scale = scales[i / 2048];
    const fp8_e4m3 want = fp8_e4m3_from_f32(v / scale, Fp8Overflow::saturate);
    ASSERT_EQ(codes[i], want.bits()) << i;
    const float value = f32_from_fp8_e4m3(want) * scale;
    ASSERT_EQ(back[static_cast<size_t>(i)], value) << i;
    EXPECT_EQ(residual[static_cast<size_t>(i)], (v - value) / 2.f) << i;
    inexact += value != v;
    EXPECT_LE(std::fabs(value - v), std::fabs(v) / 16 + 1e-6f) << i;  // 3 mantissa bits: half an ulp
  }
  EXPECT_GT(inexact, size_t{1000}) << "nothing was rounded: not quantized?";
  EXPECT_EQ(codes[100], fp8_e4m3_from_f32(-448.f).bits());  // the absmax maps to the largest code
  // A non-finite value poisons its block, as with int8.
  x[2049] = NAN;
  quantize_piece(PieceCode::fp8_e4m3, x.data(), nullptr, n, 1.f, wire.data());
  EXPECT_TRUE(std::isnan(scales[1]));
}

// A 16-bit piece is quantized as its values widened to fp32 (exactly): the same bytes, both codes;
// dequantize_piece writes any sub-range of what add_dequantized_piece adds.
TEST(Pieces, SixteenBitSourcesAndSubRanges) {
  const int64_t n = 2 * 2048 + 77;
  std::vector<bf16> b(static_cast<size_t>(n));
  std::vector<fp16> h(static_cast<size_t>(n));
  std::vector<float> wb(static_cast<size_t>(n)), wh(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::cos(0.11f * static_cast<float>(i)) * (i < 2048 ? 0.02f : 7.f);
    b[static_cast<size_t>(i)] = bf16_from_f32(v);
    h[static_cast<size_t>(i)] = fp16_from_f32(v);
    wb[static_cast<size_t>(i)] = f32_from_bf16(b[static_cast<size_t>(i)]);
    wh[static_cast<size_t>(i)] = f32_from_fp16(h[static_cast<size_t>(i)]);
  }
  for (const PieceCode code : {PieceCode::int8, PieceCode::fp8_e4m3}) {
    std::vector<char> got(static_cast<size_t>(piece_bytes(n))), want(got.size());
    quantize_piece(code, b.data(), n, got.data());
    quantize_piece(code, wb.data(), nullptr, n, 1.f, want.data());
    EXPECT_EQ(got, want) << "bf16, code " << int(code);
    quantize_piece(code, h.data(), n, got.data());
    quantize_piece(code, wh.data(), nullptr, n, 1.f, want.data());
    EXPECT_EQ(got, want) << "fp16, code " << int(code);
    std::vector<float> all(static_cast<size_t>(n), 0.f);
    add_dequantized_piece(code, got.data(), n, all.data());
    for (const auto& [begin, end] :
         std::vector<std::pair<int64_t, int64_t>>{{0, n}, {2000, 2100}, {4100, n}, {5, 5}}) {
      std::vector<float> part(static_cast<size_t>(end - begin) + 1, -1.f);
      dequantize_piece(code, got.data(), n, begin, end, part.data());
      for (int64_t i = begin; i < end; ++i)
        ASSERT_EQ(part[static_cast<size_t>(i - begin)], all[static_cast<size_t>(i)]) << begin << " " << i;
      EXPECT_EQ(part.back(), -1.f) << "wrote past the range's end";
    }
    // The values are the blocks' codes times their scales: close to the sources at 8 bits.
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(all[static_cast<size_t>(i)], wh[static_cast<size_t>(i)], (i < 2048 ? 0.02f : 7.f) / 14)
          << i;
  }
}

}  // namespace
}  // namespace mixtrain::dist
