// The wire format of the compressed gradient reduce-scatter (--grad-reduce-dtype int8 or fp8,
// train/data_parallel.h) and of ZeRO-3's compressed parameter gathers (--allgather-dtype int8 or
// fp8, train/param_shards.h, ZeRO++'s quantized weights): a rank's piece, quantized in blocks of
// kPieceBlock elements from the piece's start, one fp32 scale per block (ZeRO++'s quantized
// gradients, Wang et al. 2023, blockwise as bitsandbytes' 2048; MS-AMP's fp8 gradients with a
// scale per block instead of per tensor). For block values v, with M = 127 (int8) or 448 (fp8
// E4M3, its largest finite value):
//   scale = max|v| / M,   code = int8: clamp(round_half_even(v / scale), -127, 127)
//                                fp8:  E4M3(v / scale), rounded to nearest even, saturating
//   value = code * scale  (scale 0: codes 0).
// A block with a non-finite value gets scale NaN, so its dequantized values are NaN and the step
// is skipped as an uncompressed sum would make it.
// Error feedback (1-bit Adam's and ZeRO++'s compensation): what the codes miss is kept per element
// and added to the next gradient before it is quantized, so rounding errors are carried forward
// instead of lost. The residual is kept unscaled (divided by the loss scale), so a scale change
// between steps does not mis-weight it; a non-finite block leaves its residual as it was.
// Written here: the format is the product, and no library packs MPI pieces this way.
//
//   bytes = piece_bytes(n);                                  // scales, then codes (padded to 4 bytes)
//   quantize_piece(PieceCode::int8, x, residual, n, loss_scale, out);
//   add_dequantized_piece(PieceCode::int8, out, n, acc);     // acc[i] += value[i]
//   dequantize_piece(PieceCode::int8, out, n, 0, n, w);       // w[i] = value[i]
#pragma once
#include <cstdint>

#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain::dist {

inline constexpr int64_t kPieceBlock = 2048;

enum class PieceCode : uint8_t { int8, fp8_e4m3 };

// Bytes of a quantized piece of n elements: 4 per block (its scale), then n one-byte codes
// rounded up to 4.
int64_t piece_bytes(int64_t n);
// Quantizes v = x[i] + residual[i] * loss_scale (i < n) into out, and sets residual[i] to
// (v - value) / loss_scale. residual may be null (no error feedback).
void quantize_piece(PieceCode code, const float* x, float* residual, int64_t n, float loss_scale, char* out);
// The same for 16-bit values (a parameter gather's working copy; no error feedback): each value
// widened to fp32 exactly, then quantized as above.
void quantize_piece(PieceCode code, const bf16* x, int64_t n, char* out);
void quantize_piece(PieceCode code, const fp16* x, int64_t n, char* out);
// acc[i] += value[i] for the piece at `in` of n elements.
void add_dequantized_piece(PieceCode code, const char* in, int64_t n, float* acc);
// out[i - begin] = value[i] for i in [begin, end) of the piece at `in` of n elements.
void dequantize_piece(PieceCode code, const char* in, int64_t n, int64_t begin, int64_t end, float* out);

}  // namespace mixtrain::dist
