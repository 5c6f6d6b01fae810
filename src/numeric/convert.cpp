// Scalar bulk conversions (the oracles), the run-time dispatch to the SIMD variants and the fp8
// bulk loops. The best variant is chosen once from cpu_features(); force_reference() is checked
// on every call so it can be flipped mid-run.
#include "mixtrain/numeric/convert.h"

#include <array>
#include <cstdint>

#include "mixtrain/core/cpu_features.h"
#include "numeric/bulk.h"

namespace mixtrain {

void convert_f32_to_bf16_scalar(const float* src, bf16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(src[i]);
}
void convert_bf16_to_f32_scalar(const bf16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(src[i]);
}
void convert_f32_to_fp16_scalar(const float* src, fp16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp16_from_f32(src[i]);
}
void convert_fp16_to_f32_scalar(const fp16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_from_fp16(src[i]);
}
void convert_f32_to_fp8_e4m3_scalar(const float* src, fp8_e4m3* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_from_f32(src[i], Fp8Overflow::nan);
}
void convert_f32_to_fp8_e4m3_saturate_scalar(const float* src, fp8_e4m3* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_from_f32(src[i], Fp8Overflow::saturate);
}

namespace {

template <class Fn>
struct Variant {
  Fn* fn;
  const char* name;
};

struct Dispatch {
  Variant<void(const float*, bf16*, size_t)> f32_to_bf16{convert_f32_to_bf16_scalar, "scalar"};
  Variant<void(const bf16*, float*, size_t)> bf16_to_f32{convert_bf16_to_f32_scalar, "scalar"};
  Variant<void(const float*, fp16*, size_t)> f32_to_fp16{convert_f32_to_fp16_scalar, "scalar"};
  Variant<void(const fp16*, float*, size_t)> fp16_to_f32{convert_fp16_to_f32_scalar, "scalar"};
  Variant<void(const float*, fp8_e4m3*, size_t)> f32_to_e4m3{convert_f32_to_fp8_e4m3_scalar, "scalar"};
  Variant<void(const float*, fp8_e4m3*, size_t)> f32_to_e4m3_sat{convert_f32_to_fp8_e4m3_saturate_scalar,
                                                                 "scalar"};
};

Dispatch choose() {
  const CpuFeatures& cpu = cpu_features();
  Dispatch d;
  if (cpu.avx512f) {
    d.f32_to_bf16 = {convert_f32_to_bf16_avx512, "avx512"};
    d.bf16_to_f32 = {convert_bf16_to_f32_avx512, "avx512"};
    d.f32_to_fp16 = {convert_f32_to_fp16_avx512, "avx512"};
    d.fp16_to_f32 = {convert_fp16_to_f32_avx512, "avx512"};
    d.f32_to_e4m3 = {convert_f32_to_fp8_e4m3_avx512, "avx512"};
    d.f32_to_e4m3_sat = {convert_f32_to_fp8_e4m3_saturate_avx512, "avx512"};
  } else if (cpu.f16c && cpu.avx2 && cpu.fma) {
    d.f32_to_fp16 = {convert_f32_to_fp16_f16c, "f16c"};
    d.fp16_to_f32 = {convert_fp16_to_f32_f16c, "f16c"};
  }
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512_bf16) {
    d.f32_to_bf16 = {convert_f32_to_bf16_avx512bf16, "avx512bf16"};
  }
  return d;
}

const Dispatch& best() {
  static const Dispatch d = choose();
  return d;
}

template <class Fn>
Variant<Fn> pick(const Variant<Fn>& fast, Fn* scalar) {
  return force_reference() ? Variant<Fn>{scalar, "scalar"} : fast;
}

}  // namespace

void convert_f32_to_bf16(const float* src, bf16* dst, size_t n) {
  detail::run_chunked(src, dst, n, pick(best().f32_to_bf16, convert_f32_to_bf16_scalar).fn);
}
void convert_bf16_to_f32(const bf16* src, float* dst, size_t n) {
  detail::run_chunked(src, dst, n, pick(best().bf16_to_f32, convert_bf16_to_f32_scalar).fn);
}
void convert_f32_to_fp16(const float* src, fp16* dst, size_t n) {
  detail::run_chunked(src, dst, n, pick(best().f32_to_fp16, convert_f32_to_fp16_scalar).fn);
}
void convert_fp16_to_f32(const fp16* src, float* dst, size_t n) {
  detail::run_chunked(src, dst, n, pick(best().fp16_to_f32, convert_fp16_to_f32_scalar).fn);
}

const char* f32_to_bf16_impl_name() { return pick(best().f32_to_bf16, convert_f32_to_bf16_scalar).name; }
const char* bf16_to_f32_impl_name() { return pick(best().bf16_to_f32, convert_bf16_to_f32_scalar).name; }
const char* f32_to_fp16_impl_name() { return pick(best().f32_to_fp16, convert_f32_to_fp16_scalar).name; }
const char* fp16_to_f32_impl_name() { return pick(best().fp16_to_f32, convert_fp16_to_f32_scalar).name; }
const char* f32_to_fp8_e4m3_impl_name() {
  return pick(best().f32_to_e4m3, convert_f32_to_fp8_e4m3_scalar).name;
}

// No x86 instruction converts to fp8. Encoding to E4M3 runs the scalar function's integer
// rounding on 16 lanes where the CPU has AVX-512 (convert_avx512.cpp; the scalar loop was half of
// an fp8 MiniLM evaluation on a Xeon), E5M2 the scalar loop; decoding reads a 256-entry table
// made from the scalar decode of every code (bit-identical by construction, NaN payloads
// included): the branchy decode was most of fp8 inference's time, whose weight and activation
// codes are widened on every call.
void convert_f32_to_fp8_e4m3(const float* src, fp8_e4m3* dst, size_t n, Fp8Overflow overflow) {
  const bool sat = overflow == Fp8Overflow::saturate;
  detail::run_chunked(src, dst, n,
                      sat ? pick(best().f32_to_e4m3_sat, convert_f32_to_fp8_e4m3_saturate_scalar).fn
                          : pick(best().f32_to_e4m3, convert_f32_to_fp8_e4m3_scalar).fn);
}
namespace {
template <typename F8, float (*Decode)(F8)>
const std::array<float, 256>& decode_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int b = 0; b < 256; ++b) a[static_cast<size_t>(b)] = Decode(F8::from_bits(static_cast<uint8_t>(b)));
    return a;
  }();
  return t;
}
}  // namespace

void convert_fp8_e4m3_to_f32(const fp8_e4m3* src, float* dst, size_t n) {
  const std::array<float, 256>& t = decode_table<fp8_e4m3, f32_from_fp8_e4m3>();
  detail::run_chunked(src, dst, n, [&t](const fp8_e4m3* s, float* d, size_t m) {
    for (size_t i = 0; i < m; ++i) d[i] = t[s[i].bits()];
  });
}
void convert_f32_to_fp8_e5m2(const float* src, fp8_e5m2* dst, size_t n, Fp8Overflow overflow) {
  detail::run_chunked(src, dst, n, [overflow](const float* s, fp8_e5m2* d, size_t m) {
    for (size_t i = 0; i < m; ++i) d[i] = fp8_e5m2_from_f32(s[i], overflow);
  });
}
void convert_fp8_e5m2_to_f32(const fp8_e5m2* src, float* dst, size_t n) {
  const std::array<float, 256>& t = decode_table<fp8_e5m2, f32_from_fp8_e5m2>();
  detail::run_chunked(src, dst, n, [&t](const fp8_e5m2* s, float* d, size_t m) {
    for (size_t i = 0; i < m; ++i) d[i] = t[s[i].bits()];
  });
}

}  // namespace mixtrain
