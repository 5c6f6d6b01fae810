// The switch of kernels/cpu/simd_forms.h.
#include "kernels/cpu/simd_forms.h"

#include <atomic>

#include "mixtrain/core/cpu_features.h"

namespace mixtrain::cpu {
namespace {
std::atomic<bool> g_portable_only{false};
}  // namespace

bool portable_forms_only() { return g_portable_only.load(std::memory_order_relaxed); }
void set_portable_forms_only(bool on) { g_portable_only.store(on, std::memory_order_relaxed); }

bool avx512_forms_run() {
  static const bool cpu_ok = [] {
    const CpuFeatures& f = cpu_features();
    return f.avx512f && f.avx512bw && f.avx512vl;
  }();
  return cpu_ok && !portable_forms_only();
}

}  // namespace mixtrain::cpu
