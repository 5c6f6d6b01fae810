// Bulk stochastic rounding. Each element draws its own counter_rng(seed, offset + i), so the
// result does not depend on how OpenMP splits the loop.
#include "mixtrain/numeric/stochastic.h"

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/numeric/convert.h"
#include "numeric/bulk.h"

namespace mixtrain {

void convert_f32_to_bf16_stochastic(const float* src, bf16* dst, size_t n, uint64_t seed, uint64_t offset) {
  const uint64_t key = detail::counter_rng_key(seed);
  const CpuFeatures& cpu = cpu_features();
  const bool avx512 = cpu.avx512f && cpu.avx512bw && cpu.avx512vl && !force_reference();
  detail::run_chunked(src, dst, n, [&](const float* s, bf16* d, size_t m) {
    const uint64_t base = offset + uint64_t(s - src);  // counter of s[0]
    if (avx512) return convert_f32_to_bf16_stochastic_avx512(s, d, m, key, base);
    for (size_t i = 0; i < m; ++i) {
      d[i] = bf16_from_f32_stochastic(s[i], detail::counter_rng_keyed(key, base + i));
    }
  });
}

void convert_f32_to_fp16_stochastic(const float* src, fp16* dst, size_t n, uint64_t seed, uint64_t offset) {
  const uint64_t key = detail::counter_rng_key(seed);
  detail::run_chunked(src, dst, n, [&](const float* s, fp16* d, size_t m) {
    const uint64_t base = offset + uint64_t(s - src);
    for (size_t i = 0; i < m; ++i) {
      d[i] = fp16_from_f32_stochastic(s[i], detail::counter_rng_keyed(key, base + i));
    }
  });
}

}  // namespace mixtrain
