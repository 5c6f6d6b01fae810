// The fp32 SGD span loop, private to the kernels: the fp32 kernels (sgd_cpu.cpp) run it on the
// flat buffers, the 16-bit kernels on fp32 copies of 16-bit chunks. One template per
// (decay, mode, nesterov), so each inner loop is branch-free and auto-vectorises; the library is
// built without FMA contraction, so a vectorised loop rounds exactly like the scalar one.
#pragma once
#include <cstdint>

#include "mixtrain/kernels/optimizer_kernels.h"

namespace mixtrain::optim_detail {

enum SgdMode { kSgdPlain, kSgdFirstMomentum, kSgdMomentum };

template <bool Decay, int M, bool Nesterov>
void sgd_span(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
              const SgdScalars& s) {
  const float wd = s.weight_decay, mom = s.momentum, omd = s.one_minus_damp, neg_lr = s.neg_lr;
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (Decay) d = d + wd * p[i];
    if constexpr (M != kSgdPlain) {
      const float b = M == kSgdFirstMomentum ? d : buf[i] * mom + omd * d;
      buf[i] = b;
      d = Nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <bool Decay>
void sgd_span_mode(float* p, const float* g, float* buf, int64_t n, const SgdScalars& s) {
  if (s.momentum == 0.f) return sgd_span<Decay, kSgdPlain, false>(p, g, buf, n, s);
  if (s.first_step)
    return s.nesterov ? sgd_span<Decay, kSgdFirstMomentum, true>(p, g, buf, n, s)
                      : sgd_span<Decay, kSgdFirstMomentum, false>(p, g, buf, n, s);
  return s.nesterov ? sgd_span<Decay, kSgdMomentum, true>(p, g, buf, n, s)
                    : sgd_span<Decay, kSgdMomentum, false>(p, g, buf, n, s);
}

// p, g, buf: (n) f32 (buf may be null when momentum == 0). `decay` is the span's flag; torch
// skips the decay term when weight_decay == 0 (adding 0*p would turn -0 into +0).
inline void sgd_span_f32(float* p, const float* g, float* buf, int64_t n, bool decay, const SgdScalars& s) {
  if (decay && s.weight_decay != 0.f)
    sgd_span_mode<true>(p, g, buf, n, s);
  else
    sgd_span_mode<false>(p, g, buf, n, s);
}

}  // namespace mixtrain::optim_detail
