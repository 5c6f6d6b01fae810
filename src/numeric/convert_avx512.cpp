// AVX-512 bulk conversions: fp32 -> bf16 (VCVTNEPS2BF16 and a plain-AVX512F integer rounding
// path), bf16 -> fp32, and fp32 <-> fp16 on 16 lanes. Compiled with per-function target
// attributes (the library targets baseline x86-64) and reached only through run-time dispatch.
// Tails use masked loads/stores or a small stack buffer, never a scalar fallback, so the
// exhaustive tests exercise the same instructions on every element.
#include <immintrin.h>

#include <cstring>

// GCC 12's AVX-512 intrinsics build their masked forms on _mm512_undefined_epi32(), which trips a
// false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "mixtrain/numeric/convert.h"

#define MIXTRAIN_TARGET_AVX512 __attribute__((target("avx512f")))
#define MIXTRAIN_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace mixtrain {
namespace {

// bf16_from_f32 on 16 lanes, result still in 32-bit lanes (low 16 bits meaningful):
//   NaN lanes:   (x >> 16) | 0x40                     (quiet, top payload kept)
//   other lanes: (x + 0x7fff + ((x >> 16) & 1)) >> 16 (round to nearest even)
MIXTRAIN_TARGET_AVX512 inline __m512i bf16_round_epi32(__m512i x) {
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i biased = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
  const __m512i rounded = _mm512_srli_epi32(biased, 16);
  return _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
}

// VCVTNEPS2BF16 rounds to nearest even and quiets NaNs exactly like bf16_from_f32, but treats
// fp32 subnormal inputs as zero (DAZ, regardless of MXCSR). Those lanes -- exponent field 0,
// mantissa non-zero -- are recomputed with the integer path and blended in; real data rarely
// has any, so the fix-up is skipped when the mask is empty.
MIXTRAIN_TARGET_AVX512BF16 inline __m256i bf16_vcvt(__m512 v) {
  __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
  const __m512i x = _mm512_castps_si512(v);
  const __mmask16 subnormal = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff)) &
                              _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000));
  if (subnormal) r = _mm256_mask_mov_epi16(r, subnormal, _mm512_cvtepi32_epi16(bf16_round_epi32(x)));
  return r;
}

inline __mmask16 tail_mask(size_t remaining) { return __mmask16((1u << remaining) - 1); }

}  // namespace

MIXTRAIN_TARGET_AVX512BF16 void convert_f32_to_bf16_avx512bf16(const float* src, bf16* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_vcvt(_mm512_loadu_ps(src + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, bf16_vcvt(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

MIXTRAIN_TARGET_AVX512 void convert_f32_to_bf16_avx512(const float* src, bf16* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bf16_round_epi32(x)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i x = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, bf16_round_epi32(x));  // VPMOVDW, AVX512F
  }
}

// bf16 -> fp32: zero-extend to 32 bits and shift into the top half.
MIXTRAIN_TARGET_AVX512 void convert_bf16_to_f32_avx512(const bf16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  if (i < n) {
    // 16-bit masked loads need AVX512BW; a zeroed stack buffer keeps this path AVX512F-only.
    alignas(32) uint16_t buf[16] = {};
    std::memcpy(buf, src + i, (n - i) * sizeof(bf16));
    const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
    _mm512_mask_storeu_ps(dst + i, tail_mask(n - i),
                          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}

// fp32 -> fp16 with VCVTPS2PH: rounding from the immediate (nearest even) with exceptions
// suppressed, so neither MXCSR.RC nor FTZ changes the result.
MIXTRAIN_TARGET_AVX512 void convert_f32_to_fp16_avx512(const float* src, fp16* dst, size_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRound));
  }
  if (i < n) {
    alignas(32) uint16_t buf[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(buf),
                       _mm512_cvtps_ph(_mm512_maskz_loadu_ps(tail_mask(n - i), src + i), kRound));
    std::memcpy(dst + i, buf, (n - i) * sizeof(fp16));
  }
}

MIXTRAIN_TARGET_AVX512 void convert_fp16_to_f32_avx512(const fp16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  if (i < n) {
    alignas(32) uint16_t buf[16] = {};
    std::memcpy(buf, src + i, (n - i) * sizeof(fp16));
    _mm512_mask_storeu_ps(dst + i, tail_mask(n - i),
                          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(buf))));
  }
}

// ---- stochastic fp32 -> bf16 (numeric/stochastic.h) on 16 lanes ---------------------------------
namespace {
// a * b mod 2^64 per 64-bit lane from 32-bit products (AVX512F has no 64-bit multiply; that is DQ).
MIXTRAIN_TARGET_AVX512 inline __m512i mul64(__m512i a, __m512i b) {
  const __m512i lo = _mm512_mul_epu32(a, b);
  const __m512i cross = _mm512_add_epi64(_mm512_mul_epu32(a, _mm512_srli_epi64(b, 32)),
                                         _mm512_mul_epu32(_mm512_srli_epi64(a, 32), b));
  return _mm512_add_epi64(lo, _mm512_slli_epi64(cross, 32));
}
// detail::splitmix64_mix on 8 lanes, the high 32 bits of each result (counter_rng_keyed's draw).
MIXTRAIN_TARGET_AVX512 inline __m256i mix_hi32(__m512i z) {
  z = mul64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), _mm512_set1_epi64(int64_t(0xbf58476d1ce4e5b9ull)));
  z = mul64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), _mm512_set1_epi64(int64_t(0x94d049bb133111ebull)));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  return _mm512_cvtepi64_epi32(_mm512_srli_epi64(z, 32));
}
}  // namespace

// dst[i] = bf16_from_f32_stochastic(src[i], counter_rng_keyed(key, base + i)): the counters'
// splitmix64 inputs key + (base + i + 1) * gamma advance by 16 * gamma a vector.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void convert_f32_to_bf16_stochastic_avx512(
    const float* src, bf16* dst, size_t n, uint64_t key, uint64_t base) {
  constexpr uint64_t gamma = 0x9e3779b97f4a7c15ull;
  alignas(64) uint64_t z0[8], z1[8];
  for (int k = 0; k < 8; ++k) {
    z0[k] = key + (base + uint64_t(k) + 1) * gamma;
    z1[k] = key + (base + uint64_t(k) + 9) * gamma;
  }
  __m512i a = _mm512_load_si512(z0), b = _mm512_load_si512(z1);
  const __m512i step = _mm512_set1_epi64(int64_t(16 * gamma));
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail_mask(n - i);
    const __m512i r = _mm512_inserti64x4(_mm512_castsi256_si512(mix_hi32(a)), mix_hi32(b), 1);
    a = _mm512_add_epi64(a, step);
    b = _mm512_add_epi64(b, step);
    const __m512i x = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
    // |x| >= inf (inf, NaN): bf16_from_f32; else add the low 16 random bits below the kept ones.
    const __mmask16 special = _mm512_cmpge_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                      _mm512_set1_epi32(0x7f800000));
    const __m512i sr =
        _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_and_si512(r, _mm512_set1_epi32(0xffff))), 16);
    const __m512i out = _mm512_mask_blend_epi32(special, sr, bf16_round_epi32(x));
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(out));
  }
}

// fp8_e4m3_from_f32 on 16 lanes, branch-free: both of f32_magnitude_to_narrow_rne<3, 7>'s cases
// computed and one kept per lane, each rounding done as (v + half - 1 + lsb) >> s, which is
// shift_right_rne(v, s) (a carry out of the dropped bits exactly when they are above half, or at
// half with an odd kept part):
//   normal in E4M3 (f32 exponent field e >= 121): (a - (120 << 23)) rounded by 20 bits;
//   subnormal (1 <= e <= 120): the 24-bit significand rounded by 141 - e bits (capped at 25:
//   from 25 bits on the result is 0 either way, the significand being below 2^24 = half);
//   e == 0: 0. Codes past 0x7e (448; inf included) overflow; NaN is 0x7f.
template <bool kSaturate>
MIXTRAIN_TARGET_AVX512 void f32_to_e4m3_avx512(const float* src, fp8_e4m3* dst, size_t n) {
  const __m512i one = _mm512_set1_epi32(1);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail_mask(n - i);
    const __m512i x = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 24), _mm512_set1_epi32(0x80));
    const __m512i e = _mm512_srli_epi32(a, 23);
    // normal
    const __m512i v = _mm512_sub_epi32(a, _mm512_set1_epi32(120 << 23));
    const __m512i v_lsb = _mm512_and_si512(_mm512_srli_epi32(v, 20), one);
    const __m512i normal =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(0x7ffff)), v_lsb), 20);
    // subnormal
    const __m512i sig =
        _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x00800000));
    const __m512i sh = _mm512_min_epi32(_mm512_sub_epi32(_mm512_set1_epi32(141), e), _mm512_set1_epi32(25));
    const __m512i half_m1 = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one)), one);
    const __m512i s_lsb = _mm512_and_si512(_mm512_srlv_epi32(sig, sh), one);
    const __m512i sub = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(sig, half_m1), s_lsb), sh);
    __m512i code = _mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(e, _mm512_set1_epi32(121)), sub, normal);
    code = _mm512_maskz_mov_epi32(_mm512_cmpneq_epu32_mask(e, _mm512_setzero_si512()), code);
    const __mmask16 over = _mm512_cmpgt_epu32_mask(code, _mm512_set1_epi32(0x7e));
    code = _mm512_mask_mov_epi32(code, over, _mm512_set1_epi32(kSaturate ? 0x7e : 0x7f));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
    code = _mm512_mask_mov_epi32(code, nan, _mm512_set1_epi32(0x7f));
    _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, _mm512_or_si512(code, sign));
  }
}

void convert_f32_to_fp8_e4m3_avx512(const float* src, fp8_e4m3* dst, size_t n) {
  f32_to_e4m3_avx512<false>(src, dst, n);
}
void convert_f32_to_fp8_e4m3_saturate_avx512(const float* src, fp8_e4m3* dst, size_t n) {
  f32_to_e4m3_avx512<true>(src, dst, n);
}

}  // namespace mixtrain
