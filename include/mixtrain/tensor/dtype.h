// Element types a tensor can hold. The 16- and 8-bit float formats are distinct C++ types
// (numeric/); DType is their run-time tag. f64 exists for finite-difference gradient checks,
// i32 for token ids (and integer GEMM accumulators), i8 for the codes of int8-quantized weights and
// activations (kernels/quantize.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"
#include "mixtrain/numeric/fp8.h"

namespace mixtrain {

enum class DType : uint8_t { f32, f16, bf16, f8_e4m3, f8_e5m2, f64, i32, i8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::f8_e4m3:
      return 1;
    case DType::f8_e5m2:
      return 1;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i8:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t != DType::i32 && t != DType::i8; }
// A 16-bit (or narrower) float format: storage is low precision, math is done in fp32.
constexpr bool is_low_precision(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f8_e4m3 || t == DType::f8_e5m2;
}

// Machine epsilon (distance from 1 to the next value) of each float format; drives test
// tolerances (rtol) and is the unit of "ulp" in reports.
constexpr double dtype_epsilon(DType t) {
  switch (t) {
    case DType::f32:
      return 1.1920928955078125e-07;  // 2^-23
    case DType::f16:
      return 9.765625e-04;  // 2^-10
    case DType::bf16:
      return 7.8125e-03;  // 2^-7
    case DType::f8_e4m3:
      return 0.125;  // 2^-3
    case DType::f8_e5m2:
      return 0.25;  // 2^-2
    case DType::f64:
      return 2.220446049250313e-16;  // 2^-52
    case DType::i32:
    case DType::i8:
      return 0.0;
  }
  return 0.0;
}

std::string_view dtype_name(DType t);
// Parses "f32"/"fp32"/"float32", "bf16", "f16"/"fp16"/"float16", "f8_e4m3", "f8_e5m2", "f64", "i32", "i8".
// Throws ArgumentError naming the valid values.
DType parse_dtype(std::string_view s);

// C++ type -> DType tag, so typed accessors can check what they are given.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<fp16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<fp8_e4m3> {
  static constexpr DType value = DType::f8_e4m3;
};
template <>
struct dtype_of<fp8_e5m2> {
  static constexpr DType value = DType::f8_e5m2;
};

// Element access through the run-time tag (slow path: reference kernels, tests, strided copies).
double load_as_f64(const void* base, DType t, int64_t index);
float load_as_f32(const void* base, DType t, int64_t index);
void store_from_f64(void* base, DType t, int64_t index, double v);
void store_from_f32(void* base, DType t, int64_t index, float v);

// Contiguous conversion of n elements between any two dtypes, through the fast bulk conversions
// (numeric/convert.h) where one side is f32, else through an f32 staging buffer.
void convert_any(const void* src, DType src_t, void* dst, DType dst_t, size_t n);

}  // namespace mixtrain
