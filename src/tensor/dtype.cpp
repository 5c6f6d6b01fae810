// DType names, element access through the run-time tag, and conversion between any two dtypes.
#include "mixtrain/tensor/dtype.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain {

namespace {
// A value stored into an i8 tensor: rounded to nearest (ties to even), saturated to [-128, 127],
// NaN -> 0 (a plain cast would be undefined outside the range). Quantization proper, with a
// scale, is kernels/quantize.h.
int8_t int8_from_f64(double v) {
  if (std::isnan(v)) return 0;
  return static_cast<int8_t>(std::clamp(std::nearbyint(v), -128.0, 127.0));
}
}  // namespace

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f8_e4m3:
      return "f8_e4m3";
    case DType::f8_e5m2:
      return "f8_e5m2";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i8:
      return "i8";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f8_e4m3" || s == "e4m3") return DType::f8_e4m3;
  if (s == "f8_e5m2" || s == "e5m2") return DType::f8_e5m2;
  if (s == "f64" || s == "fp64" || s == "float64") return DType::f64;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i8" || s == "int8") return DType::i8;
  throw ArgumentError("unknown dtype '" + std::string(s) +
                      "' (valid: f32, f16, bf16, f8_e4m3, f8_e5m2, f64, i32, i8)");
}

double load_as_f64(const void* base, DType t, int64_t i) {
  if (t == DType::f64) return static_cast<const double*>(base)[i];
  if (t == DType::i32) return static_cast<const int32_t*>(base)[i];
  if (t == DType::i8) return static_cast<const int8_t*>(base)[i];
  return load_as_f32(base, t, i);
}

float load_as_f32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f16:
      return f32_from_fp16(static_cast<const fp16*>(base)[i]);
    case DType::bf16:
      return f32_from_bf16(static_cast<const bf16*>(base)[i]);
    case DType::f8_e4m3:
      return f32_from_fp8_e4m3(static_cast<const fp8_e4m3*>(base)[i]);
    case DType::f8_e5m2:
      return f32_from_fp8_e5m2(static_cast<const fp8_e5m2*>(base)[i]);
    case DType::f64:
      return static_cast<float>(static_cast<const double*>(base)[i]);
    case DType::i32:
      return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::i8:
      return static_cast<float>(static_cast<const int8_t*>(base)[i]);
  }
  return 0.f;
}

void store_from_f64(void* base, DType t, int64_t i, double v) {
  if (t == DType::f64) {
    static_cast<double*>(base)[i] = v;
  } else if (t == DType::i32) {
    static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
  } else if (t == DType::i8) {
    static_cast<int8_t*>(base)[i] = int8_from_f64(v);
  } else {
    // Double -> f32 -> narrow format can round twice; callers that need exact rounding of a
    // double to 16 bits do not exist (all math is fp32), so this is the documented behaviour.
    store_from_f32(base, t, i, static_cast<float>(v));
  }
}

void store_from_f32(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(base)[i] = v;
      break;
    case DType::f16:
      static_cast<fp16*>(base)[i] = fp16_from_f32(v);
      break;
    case DType::bf16:
      static_cast<bf16*>(base)[i] = bf16_from_f32(v);
      break;
    case DType::f8_e4m3:
      static_cast<fp8_e4m3*>(base)[i] = fp8_e4m3_from_f32(v);
      break;
    case DType::f8_e5m2:
      static_cast<fp8_e5m2*>(base)[i] = fp8_e5m2_from_f32(v);
      break;
    case DType::f64:
      static_cast<double*>(base)[i] = v;
      break;
    case DType::i32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DType::i8:
      static_cast<int8_t*>(base)[i] = int8_from_f64(v);
      break;
  }
}

namespace {

// f32 -> t for n contiguous elements, through the bulk conversions.
void from_f32(const float* src, void* dst, DType t, size_t n) {
  switch (t) {
    case DType::f32:
      std::copy(src, src + n, static_cast<float*>(dst));
      return;
    case DType::f16:
      convert_f32_to_fp16(src, static_cast<fp16*>(dst), n);
      return;
    case DType::bf16:
      convert_f32_to_bf16(src, static_cast<bf16*>(dst), n);
      return;
    case DType::f8_e4m3:
      convert_f32_to_fp8_e4m3(src, static_cast<fp8_e4m3*>(dst), n, Fp8Overflow::nan);
      return;
    case DType::f8_e5m2:
      convert_f32_to_fp8_e5m2(src, static_cast<fp8_e5m2*>(dst), n, Fp8Overflow::nan);
      return;
    case DType::f64:
    case DType::i32:
    case DType::i8:
      for (size_t i = 0; i < n; ++i) store_from_f32(dst, t, static_cast<int64_t>(i), src[i]);
      return;
  }
}

// t -> f32 for n contiguous elements.
void to_f32(const void* src, DType t, float* dst, size_t n) {
  switch (t) {
    case DType::f32:
      std::copy(static_cast<const float*>(src), static_cast<const float*>(src) + n, dst);
      return;
    case DType::f16:
      convert_fp16_to_f32(static_cast<const fp16*>(src), dst, n);
      return;
    case DType::bf16:
      convert_bf16_to_f32(static_cast<const bf16*>(src), dst, n);
      return;
    case DType::f8_e4m3:
      convert_fp8_e4m3_to_f32(static_cast<const fp8_e4m3*>(src), dst, n);
      return;
    case DType::f8_e5m2:
      convert_fp8_e5m2_to_f32(static_cast<const fp8_e5m2*>(src), dst, n);
      return;
    case DType::f64:
    case DType::i32:
    case DType::i8:
      for (size_t i = 0; i < n; ++i) dst[i] = load_as_f32(src, t, static_cast<int64_t>(i));
      return;
  }
}

}  // namespace

void convert_any(const void* src, DType src_t, void* dst, DType dst_t, size_t n) {
  if (n == 0) return;
  if (src_t == dst_t) {
    std::copy(static_cast<const char*>(src), static_cast<const char*>(src) + n * dtype_size(src_t),
              static_cast<char*>(dst));
    return;
  }
  // f64 and the integers go element by element in double so no precision is lost on the way.
  if (src_t == DType::f64 || dst_t == DType::f64 || !is_floating(src_t) || !is_floating(dst_t)) {
    for (size_t i = 0; i < n; ++i)
      store_from_f64(dst, dst_t, static_cast<int64_t>(i), load_as_f64(src, src_t, static_cast<int64_t>(i)));
    return;
  }
  if (src_t == DType::f32) return from_f32(static_cast<const float*>(src), dst, dst_t, n);
  if (dst_t == DType::f32) return to_f32(src, src_t, static_cast<float*>(dst), n);
  // Narrow -> narrow through a staging buffer of fp32 (exact: every narrow value is an f32).
  constexpr size_t kChunk = 4096;
  float buf[kChunk];
  const size_t ss = dtype_size(src_t), ds = dtype_size(dst_t);
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = std::min(kChunk, n - i);
    to_f32(static_cast<const char*>(src) + i * ss, src_t, buf, m);
    from_f32(buf, static_cast<char*>(dst) + i * ds, dst_t, m);
  }
}

}  // namespace mixtrain
