// The fp8 quantization's row primitives (fp8_rows.h) in AVX-512 intrinsics, 16 lanes, reached
// only through fp8_rows_avx512() where the CPU has AVX-512 F, BW and VL (the library targets
// baseline x86-64: per-function target attributes). fp8_cpu.cpp's loops are the readable form of
// the same definitions; tests/kernels/ops/fp8_test.cpp holds both to the reference bit for bit.
//
// Block maxima: |x| as the fp32 bits with the sign cleared, whose unsigned order is the values'
// order, capped at +inf's bits (a NaN then counts as +inf, as fp8.h says), folded with an unsigned
// max per lane and across the lanes once per block. GCC's vectoriser made a spill and a shuffle
// chain per 32-element block of it and took more time than the cast.
//
// The cast of v = x * scale to the format (M mantissa bits, smallest normal exponent emin),
// rounded to nearest even with saturation, on the value's exponent:
//   e = clamp(getexp(v), emin, 64)   the binade (getexp(0) = -inf: emin; below it, the subnormal
//                                    step 2^(emin - M) is the binade 2^emin's ulp; 64 keeps an
//                                    infinite v from scaling by inf - inf)
//   r = roundscale(v * 2^-e, M)      v's significand rounded to M fraction bits, to nearest even
//                                    (a carry to 2.0 is the next binade's 1.0)
//   y = clamp(r * 2^e, -fp8_max, fp8_max)
// Every step but the rounding is exact (scaling by powers of two), and the signs of zeros are kept.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

// GCC 12's AVX-512 intrinsics build their masked forms on _mm512_undefined_epi32(), which trips a
// false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/fp8_rows.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/numeric/bf16.h"

#define MIXTRAIN_FP8_AVX512 MIXTRAIN_AVX512_BW

namespace mixtrain::cpu {
namespace {

// 16 values stored (bf16: rounded to nearest even, as bf16_from_f32 rounds a number; the only NaN
// stored is the canonical quiet one, 0x7fc00000, whose top half is bf16_from_f32's NaN).
MIXTRAIN_FP8_AVX512 inline void fp8_store(bf16* p, __m512 v, __mmask16 m) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}
MIXTRAIN_FP8_AVX512 inline void fp8_store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }

// |v|'s bits capped at +inf's: unsigned order is the order of the values, NaN counts as +inf.
MIXTRAIN_FP8_AVX512 inline __m512i fp8_abs_bits(__m512 v) {
  return _mm512_min_epu32(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)),
                          _mm512_set1_epi32(0x7f800000));
}

// |h|'s bf16 bits capped at +inf's (0x7f80), 32 lanes: the 16-bit form of fp8_abs_bits.
MIXTRAIN_FP8_AVX512 inline __m512i fp8_abs_bits16(__m512i h) {
  return _mm512_min_epu16(_mm512_and_si512(h, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7f80));
}
// The format's constants for the rounding (see the top of the file).
struct Fp8Lanes {
  __m512 emin, emax, fmax, neg_fmax;
  float emin_pow2, fmax_scalar;  // 2^emin, fp8_max
};
MIXTRAIN_FP8_AVX512 inline Fp8Lanes fp8_lanes_of(float emin, float fmax) {
  return {_mm512_set1_ps(emin),  _mm512_set1_ps(64.f),       _mm512_set1_ps(fmax),
          _mm512_set1_ps(-fmax), std::ldexp(1.f, int(emin)), fmax};
}
template <int M>
MIXTRAIN_FP8_AVX512 inline __m512 fp8_round(__m512 v, const Fp8Lanes& f) {
  const __m512 e = _mm512_min_ps(_mm512_max_ps(_mm512_getexp_ps(v), f.emin), f.emax);
  const __m512 sig = _mm512_scalef_ps(v, _mm512_sub_ps(_mm512_setzero_ps(), e));
  const __m512 r = _mm512_roundscale_ps(sig, (M << 4) | _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_max_ps(_mm512_min_ps(_mm512_scalef_ps(r, e), f.fmax), f.neg_fmax);
}

template <typename In>
MIXTRAIN_FP8_AVX512 void fp8_block_maxes(const In* x, int64_t C, int64_t bc, float* g) {
  if (bc == 1) {  // a block per column: g[c] = max(g[c], |x[c]|), lane by lane
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = avx512::lanes16(C - c);
      const __m512i a = fp8_abs_bits(avx512::load16(x + c, m));
      const __m512i old = _mm512_maskz_loadu_epi32(m, g + c);
      _mm512_mask_storeu_epi32(g + c, m, _mm512_max_epu32(a, old));
    }
    return;
  }
  for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
    const int64_t n = std::min(bc, C - c0);
    float m;
    if constexpr (std::is_same_v<In, bf16>) {  // 32 lanes of bf16 bits
      __m512i acc = _mm512_setzero_si512();
      for (int64_t i = 0; i < n; i += 32)
        acc = _mm512_max_epu16(acc,
                               fp8_abs_bits16(_mm512_maskz_loadu_epi16(avx512::lanes32(n - i), x + c0 + i)));
      m = std::bit_cast<float>(uint32_t(avx512::reduce_max_epu16(acc)) << 16);
    } else {
      __m512i acc = _mm512_setzero_si512();
      for (int64_t i = 0; i < n; i += 16)
        acc = _mm512_max_epu32(acc, fp8_abs_bits(avx512::load16(x + c0 + i, avx512::lanes16(n - i))));
      m = std::bit_cast<float>(_mm512_reduce_max_epu32(acc));
    }
    g[j] = m > g[j] ? m : g[j];
  }
}
MIXTRAIN_FP8_AVX512 void fp8_block_maxes_avx512(const void* x, DType xt, int64_t C, int64_t bc, float* g) {
  if (xt == DType::bf16)
    fp8_block_maxes(static_cast<const bf16*>(x), C, bc, g);
  else
    fp8_block_maxes(static_cast<const float*>(x), C, bc, g);
}

// n elements with the scales s, sinv (lane by lane), NaN where s is NaN.
template <int M, typename In, typename Out>
MIXTRAIN_FP8_AVX512 inline void fp8_cast16(const In* x, __m512 s, __m512 sinv, bool dequantize, Out* o,
                                           __mmask16 m, const Fp8Lanes& f) {
  __m512 y = fp8_round<M>(_mm512_mul_ps(avx512::load16(x, m), s), f);
  if (dequantize) y = _mm512_mul_ps(y, sinv);
  fp8_store(o, y, m);
}
// The same where the lanes' scales may be NaN (a column of a block that is not finite).
template <int M, typename In, typename Out>
MIXTRAIN_FP8_AVX512 inline void fp8_cast16_nan(const In* x, __m512 s, __m512 sinv, bool dequantize, Out* o,
                                               __mmask16 m, const Fp8Lanes& f) {
  __m512 y = fp8_round<M>(_mm512_mul_ps(avx512::load16(x, m), s), f);
  if (dequantize) y = _mm512_mul_ps(y, sinv);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q), _mm512_set1_ps(NAN));
  fp8_store(o, y, m);
}

// bf16 in, bf16 out, dequantized, the block's scale a power of two 2^k (MXFP8's E8M0, the block
// recipe's pow2 rule): x * 2^k is exact, and so is the code times 2^-k, so the dequantized value is
// x rounded to M mantissa bits where x >= 2^(emin - k) (fp8's normals), saturated at
// fp8_max * 2^-k. That rounding is integer work on x's bf16 bits, 32 lanes at a time (the 16-lane
// form above takes 2.5x the instructions per element): drop the 7 - M low mantissa bits, to
// nearest even (a carry into the exponent is the next binade), cap at the limit's bits, keep the
// sign. Lanes below fp8's normals (x != 0 and |x| < 2^(emin - k), or x a bf16 subnormal) round on
// the fixed subnormal step instead: a group of 32 holding any is done by the 16-lane form.
struct Fp8Pow2Block {
  __m512i lim;  // bf16 bits of fp8_max * 2^-k
  __m512i thr;  // max(bf16 bits of 2^(emin - k), 0x0080): lanes below it (and not 0) are not fp8 normals
};
// Whether s and sinv are powers of two in fp32's normal range with fp8_max * sinv finite; then
// sets b.
MIXTRAIN_FP8_AVX512 inline bool fp8_pow2_block(float s, float sinv, float emin_pow2, float fmax,
                                               Fp8Pow2Block& b) {
  const auto pow2 = [](float v) {
    const uint32_t u = std::bit_cast<uint32_t>(v);
    return (u & 0x807fffffu) == 0 && (u >> 23) != 0 && (u >> 23) != 0xff;
  };
  const float lim = fmax * sinv, thr = emin_pow2 * sinv;
  if (!pow2(s) || !pow2(sinv) || s * sinv != 1.f || !std::isfinite(lim)) return false;
  b.lim = _mm512_set1_epi16(short(std::bit_cast<uint32_t>(lim) >> 16));
  b.thr = _mm512_set1_epi16(short(std::max<uint32_t>(std::bit_cast<uint32_t>(thr) >> 16, 0x0080u)));
  return true;
}
template <int M>
MIXTRAIN_FP8_AVX512 void fp8_cast_pow2_bf16(const bf16* x, float s, float sinv, const Fp8Pow2Block& b,
                                            bf16* o, int64_t n, const Fp8Lanes& f) {
  constexpr int drop = 7 - M;
  const __m512i half = _mm512_set1_epi16((1 << (drop - 1)) - 1),
                keep = _mm512_set1_epi16(short(~((1 << drop) - 1)));
  const __m512i one = _mm512_set1_epi16(1), magnitude = _mm512_set1_epi16(0x7fff);
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = avx512::lanes32(n - i);
    const __m512i h = _mm512_maskz_loadu_epi16(m, x + i);
    const __m512i ab = _mm512_and_si512(h, magnitude);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(ab, drop), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi16(_mm512_add_epi16(ab, half), lsb), keep);
    r = _mm512_or_si512(_mm512_min_epu16(r, b.lim), _mm512_andnot_si512(magnitude, h));
    _mm512_mask_storeu_epi16(o + i, m, r);
    if (_mm512_mask_cmplt_epu16_mask(_mm512_test_epi16_mask(ab, ab), ab, b.thr) & m) {
      const __m512 sv = _mm512_set1_ps(s), siv = _mm512_set1_ps(sinv);
      for (int64_t k = i; k < std::min(n, i + 32); k += 16)
        fp8_cast16<M>(x + k, sv, siv, true, o + k, avx512::lanes16(n - k), f);
    }
  }
}
// The same with a scale per column (bc == 1: the transposed MXFP8 and 1 x 128 uses): each lane's
// limit and threshold from its sinv, the high halves of fp8_max * sinv and 2^emin * sinv (exact:
// powers of two times values of 3 significant bits) packed to 16 bits; NaN scales (columns of a
// block that is not finite) give the quiet NaN.
template <int M>
MIXTRAIN_FP8_AVX512 void fp8_cast_pow2_bf16_cols(const bf16* x, const float* s, const float* sinv, bf16* o,
                                                 int64_t n, const Fp8Lanes& f) {
  constexpr int drop = 7 - M;
  const __m512i half = _mm512_set1_epi16((1 << (drop - 1)) - 1),
                keep = _mm512_set1_epi16(short(~((1 << drop) - 1)));
  const __m512i one = _mm512_set1_epi16(1), magnitude = _mm512_set1_epi16(0x7fff);
  const __m512i min_thr = _mm512_set1_epi16(0x0080), qnan = _mm512_set1_epi16(0x7fc0);
  const __m512 fmax = _mm512_set1_ps(f.fmax_scalar), emin_pow2 = _mm512_set1_ps(f.emin_pow2);
  alignas(64) static constexpr int16_t kHighHalves[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                          23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                          45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  const __m512i high = _mm512_load_si512(kHighHalves);
  const auto pack_high = [&](__m512 lo, __m512 hi) MIXTRAIN_FP8_AVX512 {
    return _mm512_permutex2var_epi16(_mm512_castps_si512(lo), high, _mm512_castps_si512(hi));
  };
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = avx512::lanes32(n - i);
    const __mmask16 m_lo = avx512::lanes16(n - i), m_hi = n - i > 16 ? avx512::lanes16(n - i - 16) : 0;
    const __m512 si_lo = _mm512_maskz_loadu_ps(m_lo, sinv + i),
                 si_hi = _mm512_maskz_loadu_ps(m_hi, sinv + i + 16);
    const __m512i lim = pack_high(_mm512_mul_ps(si_lo, fmax), _mm512_mul_ps(si_hi, fmax));
    const __m512i thr = _mm512_max_epu16(
        pack_high(_mm512_mul_ps(si_lo, emin_pow2), _mm512_mul_ps(si_hi, emin_pow2)), min_thr);
    const __mmask32 nan = _mm512_kunpackw(_mm512_cmp_ps_mask(si_hi, si_hi, _CMP_UNORD_Q),
                                          _mm512_cmp_ps_mask(si_lo, si_lo, _CMP_UNORD_Q));
    const __m512i h = _mm512_maskz_loadu_epi16(m, x + i);
    const __m512i ab = _mm512_and_si512(h, magnitude);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(ab, drop), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi16(_mm512_add_epi16(ab, half), lsb), keep);
    r = _mm512_or_si512(_mm512_min_epu16(r, lim), _mm512_andnot_si512(magnitude, h));
    _mm512_mask_storeu_epi16(o + i, m, _mm512_mask_mov_epi16(r, nan, qnan));
    if (_mm512_mask_cmplt_epu16_mask(_mm512_test_epi16_mask(ab, ab), ab, thr) & m & ~nan) {
      for (int64_t k = i; k < std::min(n, i + 32); k += 16) {
        const __mmask16 mk = avx512::lanes16(n - k);
        fp8_cast16_nan<M>(x + k, _mm512_maskz_loadu_ps(mk, s + k), _mm512_maskz_loadu_ps(mk, sinv + k), true,
                          o + k, mk, f);
      }
    }
  }
}

template <int M, typename In, typename Out>
MIXTRAIN_FP8_AVX512 void fp8_cast_blocks(const In* x, const float* s, const float* sinv, int64_t bc,
                                         bool dequantize, bool pow2_scales, Out* o, int64_t C,
                                         const Fp8Lanes& f) {
  constexpr bool bf16_io = std::is_same_v<In, bf16> && std::is_same_v<Out, bf16>;
  if constexpr (bf16_io) {
    if (bc == 1 && dequantize && pow2_scales) return fp8_cast_pow2_bf16_cols<M>(x, s, sinv, o, C, f);
  }
  if (bc == 1) {
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = avx512::lanes16(C - c);
      fp8_cast16_nan<M>(x + c, _mm512_maskz_loadu_ps(m, s + c), _mm512_maskz_loadu_ps(m, sinv + c),
                        dequantize, o + c, m, f);
    }
    return;
  }
  for (int64_t j = 0, c0 = 0; c0 < C; ++j, c0 += bc) {
    const int64_t n = std::min(bc, C - c0);
    if (std::isnan(s[j])) {  // a block that is not finite
      for (int64_t i = 0; i < n; i += 16) fp8_store(o + c0 + i, _mm512_set1_ps(NAN), avx512::lanes16(n - i));
      continue;
    }
    if constexpr (bf16_io) {
      Fp8Pow2Block b;
      if (dequantize && fp8_pow2_block(s[j], sinv[j], f.emin_pow2, f.fmax_scalar, b)) {
        fp8_cast_pow2_bf16<M>(x + c0, s[j], sinv[j], b, o + c0, n, f);
        continue;
      }
    }
    const __m512 sj = _mm512_set1_ps(s[j]), sij = _mm512_set1_ps(sinv[j]);
    for (int64_t i = 0; i < n; i += 16)
      fp8_cast16<M>(x + c0 + i, sj, sij, dequantize, o + c0 + i, avx512::lanes16(n - i), f);
  }
}
template <int M, typename In>
MIXTRAIN_FP8_AVX512 void fp8_cast_blocks_to(const In* x, const float* s, const float* sinv, int64_t bc,
                                            bool dequantize, bool pow2_scales, void* o, DType ot, int64_t C,
                                            const Fp8Lanes& f) {
  if (ot == DType::bf16)
    fp8_cast_blocks<M>(x, s, sinv, bc, dequantize, pow2_scales, static_cast<bf16*>(o), C, f);
  else
    fp8_cast_blocks<M>(x, s, sinv, bc, dequantize, pow2_scales, static_cast<float*>(o), C, f);
}
template <int M>
MIXTRAIN_FP8_AVX512 void fp8_cast_blocks_from(const void* x, DType xt, const float* s, const float* sinv,
                                              int64_t bc, bool dequantize, bool pow2_scales, void* o,
                                              DType ot, int64_t C, const Fp8Lanes& f) {
  if (xt == DType::bf16)
    fp8_cast_blocks_to<M>(static_cast<const bf16*>(x), s, sinv, bc, dequantize, pow2_scales, o, ot, C, f);
  else
    fp8_cast_blocks_to<M>(static_cast<const float*>(x), s, sinv, bc, dequantize, pow2_scales, o, ot, C, f);
}
MIXTRAIN_FP8_AVX512 void fp8_cast_blocks_avx512(const void* x, DType xt, const float* s, const float* sinv,
                                                int64_t bc, bool dequantize, bool pow2_scales, void* o,
                                                DType ot, DType format, int64_t C) {
  if (format == DType::f8_e4m3)
    fp8_cast_blocks_from<3>(x, xt, s, sinv, bc, dequantize, pow2_scales, o, ot, C, fp8_lanes_of(-6.f, 448.f));
  else
    fp8_cast_blocks_from<2>(x, xt, s, sinv, bc, dequantize, pow2_scales, o, ot, C,
                            fp8_lanes_of(-14.f, 57344.f));
}

}  // namespace

const Fp8RowKernels* fp8_rows_avx512() {
  static const Fp8RowKernels k{fp8_block_maxes_avx512, fp8_cast_blocks_avx512,
                               /*block_scales_preferred=*/true};
  const CpuFeatures& cpu = cpu_features();
  return cpu.avx512f && cpu.avx512bw && cpu.avx512vl ? &k : nullptr;
}

}  // namespace mixtrain::cpu
