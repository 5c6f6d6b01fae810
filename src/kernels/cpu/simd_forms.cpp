// The switch of kernels/cpu/simd_forms.h.
#include "kernels/cpu/simd_forms.h"

#include <atomic>

namespace mixtrain::cpu {
namespace {
std::atomic<bool> g_portable_only{false};
}  // namespace

bool portable_forms_only() { return g_portable_only.load(std::memory_order_relaxed); }
void set_portable_forms_only(bool on) { g_portable_only.store(on, std::memory_order_relaxed); }

}  // namespace mixtrain::cpu
