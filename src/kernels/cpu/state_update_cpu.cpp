// The optimizer kernels over bf16 or int8 state (kernels/state_kernels.h): the scalar references
// and the fast versions. Both run the block (int8: a cell of the 256-element grid within one
// span; bf16: a chunk) through the same steps: decode the state to fp32, the fp32 update of the
// element functions (adamw_span.h, sgd_span.h), encode. The fast ones differ only in how they
// search a code (a bucket table over the float's top 16 bits, then at most a few thresholds,
// instead of counting all 255) and in running pieces in parallel; every element and block is
// independent, so they are bit-identical to the references for any thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/adamw_span.h"
#include "kernels/cpu/lowp_span.h"
#include "kernels/cpu/sgd_span.h"
#include "mixtrain/kernels/state_kernels.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {
namespace {

// max |x| over n values; NaN if any is NaN (so a non-finite state stays visible, never silently
// quantized to a finite one).
float block_absmax(const float* x, int64_t n) {
  float a = 0.f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float y = std::fabs(x[i]);
    nan |= y != y;
    a = y > a ? y : a;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : a;
}

// bitsandbytes' scaling: x * (1 / absmax), clamped to [-1, 1] (NaN stays NaN).
inline float scaled(float x, float inv) {
  const float s = x * inv;
  return s < -1.f ? -1.f : (s > 1.f ? 1.f : s);
}

// The fast code search: for each value of a float's top 16 bits (sign, exponent, 7 mantissa
// bits) the codes of the smallest and largest float with those bits; a value's code lies between
// and is found by stepping over the thresholds in between (at most a few: the map's values are
// at least 2^-8 apart relative to their size).
struct CodeTable {
  const DynamicMap* map;
  std::unique_ptr<uint8_t[]> lo, hi;
  explicit CodeTable(const DynamicMap& m) : map(&m), lo(new uint8_t[65536]), hi(new uint8_t[65536]) {
    for (uint32_t k = 0; k < 65536; ++k) {
      if (((k >> 7) & 0xffu) == 0xffu) {  // inf / NaN: after the clamp only NaN, code 0
        lo[k] = hi[k] = 0;
        continue;
      }
      const float a = std::bit_cast<float>(k << 16), b = std::bit_cast<float>((k << 16) | 0xffffu);
      const float mn = std::min(a, b), mx = std::max(a, b);
      lo[k] = dynamic_code_ref(m, mn);
      hi[k] = dynamic_code_ref(m, mx);
    }
  }
  uint8_t code(float s) const {
    const uint32_t k = std::bit_cast<uint32_t>(s) >> 16;
    unsigned c = lo[k];
    const unsigned h = hi[k];
    while (c < h && s > map->below[c]) ++c;
    return uint8_t(c);
  }
};
const CodeTable& code_table(bool is_signed) {
  static const CodeTable s(dynamic_map(true)), u(dynamic_map(false));
  return is_signed ? s : u;
}

// One int8 block: x (n) fp32 -> codes and absmax.
template <bool Ref>
void encode_block(const float* x, int64_t n, const MomentBuf& b, uint8_t* codes, float& absmax) {
  const DynamicMap& map = dynamic_map(b.is_signed);
  const float a = block_absmax(x, n);
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
    for (int64_t i = 0; i < n; ++i) codes[i] = t.code(scaled(x[i], inv));
  }
}

void decode_block(const uint8_t* codes, float absmax, int64_t n, bool is_signed, float* x) {
  const float* v = dynamic_map(is_signed).value.data();
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
      decode_block(b->codes + o, b->absmax[s.blk], n, b->is_signed, scratch);
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
      const BlockState a = open_state(m0, *pc.st, o, n, counter_base, s0);
      const BlockState b = open_state(m1, *pc.st, o, n, counter_base, s1);
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

template <bool Ref>
void adamw_state(float* p, const float* g, const MomentBuf& m, const MomentBuf& v,
                 const std::vector<StateSpan>& spans, const AdamWScalars& s, uint64_t counter_base,
                 const WorkingCopyOut& working) {
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  run_pieces<Ref>(p, spans, &m, &v, counter_base, working,
                  [&](int64_t o, int64_t n, bool decay, float* mf, float* vf) {
                    if constexpr (Ref)
                      optim_detail::adamw_span_ref_f32(p + o, g + o, mf, vf, n, decay, small_w, s);
                    else
                      optim_detail::adamw_span_fast_f32(p + o, g + o, mf, vf, n, decay, small_w, s);
                  });
}

template <bool Ref>
void sgd_state(float* p, const float* g, const MomentBuf& buf, const std::vector<StateSpan>& spans,
               const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working) {
  const MomentBuf* b = s.momentum == 0.f ? nullptr : &buf;
  run_pieces<Ref>(p, spans, b, nullptr, counter_base, working,
                  [&](int64_t o, int64_t n, bool decay, float* bf, float*) {
                    if constexpr (Ref) {
                      for (int64_t i = 0; i < n; ++i)
                        optim_detail::sgd_span_f32(p + o + i, g + o + i, bf ? bf + i : nullptr, 1, decay, s);
                    } else {
                      optim_detail::sgd_span_f32(p + o, g + o, bf, n, decay, s);
                    }
                  });
}

}  // namespace

uint8_t dynamic_code(bool is_signed, float s) { return code_table(is_signed).code(s); }

void adamw_update_state_ref(float* p, const float* g, const MomentBuf& m, const MomentBuf& v,
                            const std::vector<StateSpan>& spans, const AdamWScalars& s, uint64_t counter_base,
                            const WorkingCopyOut& working) {
  adamw_state<true>(p, g, m, v, spans, s, counter_base, working);
}
void adamw_update_state(float* p, const float* g, const MomentBuf& m, const MomentBuf& v,
                        const std::vector<StateSpan>& spans, const AdamWScalars& s, uint64_t counter_base,
                        const WorkingCopyOut& working) {
  adamw_state<false>(p, g, m, v, spans, s, counter_base, working);
}
void sgd_update_state_ref(float* p, const float* g, const MomentBuf& buf, const std::vector<StateSpan>& spans,
                          const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working) {
  sgd_state<true>(p, g, buf, spans, s, counter_base, working);
}
void sgd_update_state(float* p, const float* g, const MomentBuf& buf, const std::vector<StateSpan>& spans,
                      const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working) {
  sgd_state<false>(p, g, buf, spans, s, counter_base, working);
}

}  // namespace mixtrain
