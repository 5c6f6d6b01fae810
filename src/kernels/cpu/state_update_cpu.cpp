// The optimizer kernels over bf16 or int8 state (kernels/state_kernels.h): the scalar references
// and the fast versions. Both run the block (int8: a cell of the 256-element grid within one
// span; bf16: a chunk) through the same steps: decode the state to fp32, the fp32 update of the
// element functions (adamw_span.h, sgd_span.h), encode. The fast ones differ only in how they
// search a code (a bucket table over the float's top 16 bits, then at most a few thresholds,
// instead of counting all 255) and in running pieces in parallel; every element and block is
// independent, so they are bit-identical to the references for any thread count.
#include <immintrin.h>

// GCC 12: a false -Wmaybe-uninitialized from the masked AVX-512 intrinsics (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/adamw_span.h"
#include "kernels/cpu/lowp_span.h"
#include "kernels/cpu/sgd_span.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/state_kernels.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {
namespace {

// max |x| over n values, as the largest of the magnitudes' bit patterns: for numbers the largest
// magnitude, and a NaN if any is NaN (so a non-finite state stays visible, never silently
// quantized to a finite one).
float block_absmax(const float* x, int64_t n) {
  uint32_t a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return std::bit_cast<float>(a);
}

// bitsandbytes' scaling: x * (1 / absmax), clamped to [-1, 1] (NaN stays NaN).
inline float scaled(float x, float inv) {
  const float s = x * inv;
  return s < -1.f ? -1.f : (s > 1.f ? 1.f : s);
}

// The fast code search: for each value of a float's top 16 bits (sign, exponent, 7 mantissa
// bits) the codes of the smallest and largest float in [-1, 1] with those bits. They differ by
// at most one (checked here: the map's values are at least 2^-8 apart relative to their size),
// so a value's code is the smaller plus one comparison with the threshold between them.
// entry[k] = lo | (hi - lo) << 8; below[255] = +inf pads the comparison of code 255.
struct CodeTable {
  std::unique_ptr<int32_t[]> entry;
  alignas(64) float below[256];
  explicit CodeTable(const DynamicMap& m) : entry(new int32_t[65536]) {
    for (size_t i = 0; i < 255; ++i) below[i] = m.below[i];
    below[255] = INFINITY;
    for (uint32_t k = 0; k < 65536; ++k) {
      if (((k >> 7) & 0xffu) == 0xffu) {  // inf / NaN: after the clamp only NaN, code 0
        entry[k] = 0;
        continue;
      }
      const float a = std::bit_cast<float>(k << 16), b = std::bit_cast<float>((k << 16) | 0xffffu);
      const float mn = std::clamp(std::min(a, b), -1.f, 1.f), mx = std::clamp(std::max(a, b), -1.f, 1.f);
      const int lo = dynamic_code_ref(m, mn), hi = dynamic_code_ref(m, mx);
      if (hi - lo > 1) throw Error("dynamic map: more than one threshold in a 16-bit bucket");
      entry[k] = lo | (hi - lo) << 8;
    }
  }
  uint8_t code(float s) const {
    const int32_t e = entry[std::bit_cast<uint32_t>(s) >> 16];
    const int c = e & 0xff;
    return uint8_t(c + ((e >> 8) & int(s > below[c])));
  }
};
const CodeTable& code_table(bool is_signed) {
  static const CodeTable s(dynamic_map(true)), u(dynamic_map(false));
  return is_signed ? s : u;
}

// One int8 block: x (n) fp32 -> codes and absmax.
#define MIXTRAIN_TARGET_AVX512 __attribute__((target("avx512f")))

// The AVX-512 forms of the block's absmax, encoding and decoding: the same operations on 16 lanes
// (gathers from the code table and the map), masked tails.
MIXTRAIN_TARGET_AVX512 float block_absmax_avx512(const float* x, int64_t n) {
  __m512i a = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512i v =
        _mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i)), _mm512_set1_epi32(0x7fffffff));
    a = _mm512_max_epu32(a, v);
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, a);
  return std::bit_cast<float>(*std::max_element(lanes, lanes + 16));
}

MIXTRAIN_TARGET_AVX512 void encode_avx512(const float* x, int64_t n, float inv, const CodeTable& t,
                                          uint8_t* codes) {
  const __m512 vinv = _mm512_set1_ps(inv), one = _mm512_set1_ps(1.f), neg = _mm512_set1_ps(-1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv);
    s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, neg, _CMP_LT_OQ), s, neg);  // NaN stays NaN
    s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, one, _CMP_GT_OQ), s, one);
    const __m512i key = _mm512_srli_epi32(_mm512_castps_si512(s), 16);
    const __m512i e = _mm512_i32gather_epi32(key, t.entry.get(), 4);
    __m512i c = _mm512_and_si512(e, _mm512_set1_epi32(0xff));
    const __mmask16 step = _mm512_test_epi32_mask(e, _mm512_set1_epi32(0x100));
    const __m512 b = _mm512_i32gather_ps(c, t.below, 4);
    c = _mm512_mask_add_epi32(c, _mm512_mask_cmp_ps_mask(step, s, b, _CMP_GT_OQ), c, _mm512_set1_epi32(1));
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, c);
  }
}

MIXTRAIN_TARGET_AVX512 void decode_avx512(const uint8_t* codes, float absmax, int64_t n, const float* v,
                                          float* x) {
  const __m512 a = _mm512_set1_ps(absmax);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_i32gather_ps(c, v, 4), a));
  }
  if (i < n) {
    const int64_t k = n - i;
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, codes + i, size_t(k));
    const __m512i c = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
    _mm512_mask_storeu_ps(x + i, __mmask16((1u << k) - 1), _mm512_mul_ps(_mm512_i32gather_ps(c, v, 4), a));
  }
}

bool use_avx512() {
  static const bool on = cpu_features().avx512f;
  return on && !force_reference();
}

template <bool Ref>
void encode_block(const float* x, int64_t n, const MomentBuf& b, uint8_t* codes, float& absmax) {
  const DynamicMap& map = dynamic_map(b.is_signed);
  const bool simd = !Ref && use_avx512();
  const float a = simd ? block_absmax_avx512(x, n) : block_absmax(x, n);
  absmax = a;
  if (a == 0.f) {
    std::memset(codes, map.zero_code, size_t(n));
    return;
  }
  const float inv = 1.f / a;
  if constexpr (Ref) {
    for (int64_t i = 0; i < n; ++i) codes[i] = dynamic_code_ref(map, scaled(x[i], inv));
  } else {
    const CodeTable& t = code_table(b.is_signed);
    if (simd) return encode_avx512(x, n, inv, t, codes);
    for (int64_t i = 0; i < n; ++i) codes[i] = t.code(scaled(x[i], inv));
  }
}

template <bool Ref>
void decode_block(const uint8_t* codes, float absmax, int64_t n, bool is_signed, float* x) {
  const float* v = dynamic_map(is_signed).value.data();
  if (!Ref && use_avx512()) return decode_avx512(codes, absmax, n, v, x);
  for (int64_t i = 0; i < n; ++i) x[i] = v[codes[i]] * absmax;
}

// The state of moment b for elements [o, o + n) of span st (a block of the grid, or a bf16
// chunk): `f` points at fp32 values to update in place (the buffer itself for fp32 and the int8
// fallback, else `scratch` filled by decoding); commit() stores them back.
struct BlockState {
  const MomentBuf* b = nullptr;
  float* f = nullptr;
  int64_t o = 0, n = 0, blk = 0;
  uint64_t counter = 0;  // bf16: the draw of element o
  template <bool Ref>
  void commit() const {
    if (!b) return;
    switch (b->precision) {
      case StatePrecision::fp32:
        return;
      case StatePrecision::bf16:
        if constexpr (Ref) {
          for (int64_t i = 0; i < n; ++i)
            b->b16[o + i] = bf16_from_f32_stochastic(f[i], counter_rng(b->seed, counter + uint64_t(i)));
        } else {
          convert_f32_to_bf16_stochastic(f, b->b16 + o, size_t(n), b->seed, counter);
        }
        return;
      case StatePrecision::int8:
        if (blk >= 0) encode_block<Ref>(f, n, *b, b->codes + o, b->absmax[blk]);
        return;
    }
  }
};

template <bool Ref>
BlockState open_state(const MomentBuf* b, const StateSpan& st, int64_t o, int64_t n, uint64_t counter_base,
                      float* scratch) {
  BlockState s;
  if (!b) return s;
  s.b = b;
  s.o = o;
  s.n = n;
  s.blk = -1;
  s.counter = counter_base + uint64_t(o);
  switch (b->precision) {
    case StatePrecision::fp32:
      s.f = b->f32 + o;
      break;
    case StatePrecision::bf16:
      convert_bf16_to_f32(b->b16 + o, scratch, size_t(n));
      s.f = scratch;
      break;
    case StatePrecision::int8:
      if (!st.quantized) {
        s.f = b->f32 + st.fallback_offset + (o - st.span.offset);
        break;
      }
      s.blk = st.block_offset + o / kInt8StateBlock - st.span.offset / kInt8StateBlock;
      decode_block<Ref>(b->codes + o, b->absmax[s.blk], n, b->is_signed, scratch);
      s.f = scratch;
      break;
  }
  return s;
}

// f(o, n) over [lo, hi) of a span in blocks: cells of the 256-grid for int8, else chunks of 256.
template <class F>
void for_each_block(int64_t lo, int64_t hi, F&& f) {
  for (int64_t o = lo; o < hi;) {
    const int64_t e = std::min(hi, (o / kInt8StateBlock + 1) * kInt8StateBlock);
    f(o, e - o);
    o = e;
  }
}

// Pieces of at most kPieceNumel elements on the grid (so no block straddles two), each span's
// parts in order: the OpenMP work items of the fast kernels.
struct Piece {
  const StateSpan* st;
  int64_t lo, hi;
};
std::vector<Piece> pieces_of(const std::vector<StateSpan>& spans) {
  constexpr int64_t P = optim_detail::kPieceNumel;  // a multiple of 256
  std::vector<Piece> out;
  for (const StateSpan& st : spans) {
    const int64_t a = st.span.offset, e = a + st.span.numel;
    for (int64_t o = a; o < e;) {
      const int64_t hi = std::min(e, (o / P + 1) * P);
      out.push_back({&st, o, hi});
      o = hi;
    }
  }
  return out;
}

template <bool Ref, class Update>
void run_pieces(float* p, const std::vector<StateSpan>& spans, const MomentBuf* m0, const MomentBuf* m1,
                uint64_t counter_base, const WorkingCopyOut& working, Update&& update) {
  const std::vector<Piece> pieces = pieces_of(spans);
  const int64_t np = int64_t(pieces.size());
  auto one = [&](const Piece& pc) {
    alignas(64) float s0[kInt8StateBlock], s1[kInt8StateBlock];
    for_each_block(pc.lo, pc.hi, [&](int64_t o, int64_t n) {
      const BlockState a = open_state<Ref>(m0, *pc.st, o, n, counter_base, s0);
      const BlockState b = open_state<Ref>(m1, *pc.st, o, n, counter_base, s1);
      update(o, n, pc.st->span.decay, a.f, b.f);
      a.template commit<Ref>();
      b.template commit<Ref>();
    });
    write_working_copy(p, working, pc.lo, pc.hi - pc.lo);
  };
  if constexpr (Ref) {
    for (const Piece& pc : pieces) one(pc);
  } else {
#pragma omp parallel for schedule(static) if (np > 1)
    for (int64_t i = 0; i < np; ++i) one(pieces[size_t(i)]);
  }
}

// The gradients of [o, o + n) as fp32: the arena itself (fp32), or loaded into `scratch` from the
// 16-bit gradients of master rounding (optim/master_weights.h).
template <bool Ref, class G>
const float* grads_f32(const G* g, int64_t o, int64_t n, float* scratch) {
  if constexpr (std::is_same_v<G, float>) {
    return g + o;
  } else {
    if constexpr (Ref) {
      for (int64_t i = 0; i < n; ++i) scratch[i] = optim_detail::Lowp<G>::load(g[o + i]);
    } else {
      optim_detail::Lowp<G>::load_n(g + o, scratch, n);
    }
    return scratch;
  }
}

template <bool Ref, class G>
void adamw_state(float* p, const G* g, const MomentBuf& m, const MomentBuf& v,
                 const std::vector<StateSpan>& spans, const AdamWScalars& s, uint64_t counter_base,
                 const WorkingCopyOut& working) {
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  run_pieces<Ref>(p, spans, &m, &v, counter_base, working,
                  [&](int64_t o, int64_t n, bool decay, float* mf, float* vf) {
                    alignas(64) float gs[kInt8StateBlock];
                    const float* gf = grads_f32<Ref>(g, o, n, gs);
                    if constexpr (Ref)
                      optim_detail::adamw_span_ref_f32(p + o, gf, mf, vf, n, decay, small_w, s);
                    else
                      optim_detail::adamw_span_fast_f32(p + o, gf, mf, vf, n, decay, small_w, s);
                  });
}

template <bool Ref, class G>
void sgd_state(float* p, const G* g, const MomentBuf& buf, const std::vector<StateSpan>& spans,
               const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working) {
  const MomentBuf* b = s.momentum == 0.f ? nullptr : &buf;
  run_pieces<Ref>(p, spans, b, nullptr, counter_base, working,
                  [&](int64_t o, int64_t n, bool decay, float* bf, float*) {
                    alignas(64) float gs[kInt8StateBlock];
                    const float* gf = grads_f32<Ref>(g, o, n, gs);
                    if constexpr (Ref) {
                      for (int64_t i = 0; i < n; ++i)
                        optim_detail::sgd_span_f32(p + o + i, gf + i, bf ? bf + i : nullptr, 1, decay, s);
                    } else {
                      optim_detail::sgd_span_f32(p + o, gf, bf, n, decay, s);
                    }
                  });
}

}  // namespace

uint8_t dynamic_code(bool is_signed, float s) { return code_table(is_signed).code(s); }

#define MIXTRAIN_STATE_KERNELS(G)                                                                            \
  void adamw_update_state_ref(float* p, const G* g, const MomentBuf& m, const MomentBuf& v,                  \
                              const std::vector<StateSpan>& spans, const AdamWScalars& s,                    \
                              uint64_t counter_base, const WorkingCopyOut& working) {                        \
    adamw_state<true>(p, g, m, v, spans, s, counter_base, working);                                          \
  }                                                                                                          \
  void adamw_update_state(float* p, const G* g, const MomentBuf& m, const MomentBuf& v,                      \
                          const std::vector<StateSpan>& spans, const AdamWScalars& s, uint64_t counter_base, \
                          const WorkingCopyOut& working) {                                                   \
    adamw_state<false>(p, g, m, v, spans, s, counter_base, working);                                         \
  }                                                                                                          \
  void sgd_update_state_ref(float* p, const G* g, const MomentBuf& buf, const std::vector<StateSpan>& spans, \
                            const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working) {     \
    sgd_state<true>(p, g, buf, spans, s, counter_base, working);                                             \
  }                                                                                                          \
  void sgd_update_state(float* p, const G* g, const MomentBuf& buf, const std::vector<StateSpan>& spans,     \
                        const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working) {         \
    sgd_state<false>(p, g, buf, spans, s, counter_base, working);                                            \
  }
MIXTRAIN_STATE_KERNELS(float)
MIXTRAIN_STATE_KERNELS(bf16)
MIXTRAIN_STATE_KERNELS(fp16)
#undef MIXTRAIN_STATE_KERNELS

}  // namespace mixtrain
