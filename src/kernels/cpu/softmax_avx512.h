// The softmax rows' exponentials and the masked scores' maximum in AVX-512 (softmax_avx512.cpp);
// the portable loops are reduce_cpu.cpp's exp_sub_block_sum / exp_sub and encoder_cpu.cpp's
// masked_scale_max, and kernels/cpu/simd_forms.h says which form runs (avx512_forms_run).
#pragma once
#include <cstdint>

namespace mixtrain::cpu {

// out[i] = exp(x[i] - m) as cpu_rows.h exp_f32 computes it (the same steps, so the same values);
// returns their sum in block_sum_sq_dev's lanes, sub-totals, tail and lane tree (n <= kSumBlock),
// so that it is sum_f32(out) bit for bit.
float exp_sub_block_sum_avx512(const float* x, float m, float* out, int64_t n);
// out[i] = exp(x[i] - m), any n.
void exp_sub_avx512(const float* x, float m, float* out, int64_t n);
// The largest of p[0, n) (n <= kSumBlock), NaN when one is NaN: reduce_cpu.cpp's block_max's value
// (of several NaNs with different payloads it may return another one: block_max folds the tail
// into lane 0, this into the tail's own lanes).
float block_max_avx512(const float* p, int64_t n);
// s[i] = scale * p[i] where key mask m[i] != 0, else -inf; returns the largest s, NaN when one is
// NaN (encoder_cpu.cpp's masked_scale_max: the same value).
float masked_scale_max_avx512(const float* p, const int32_t* m, float scale, float* s, int64_t n);

}  // namespace mixtrain::cpu
