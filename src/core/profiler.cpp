// The step-time profiler's counters (see the header).
#include "mixtrain/core/profiler.h"

namespace mixtrain {
namespace {
std::array<std::atomic<int64_t>, kNumWorkKinds> g_ns{};
constexpr std::array<std::string_view, kNumWorkKinds> kNames = {
    "gemm", "attention", "normalization", "elementwise", "casts", "loss", "optimizer", "scaler", "allocator"};
}  // namespace

std::atomic<bool> Profiler::enabled_{false};
thread_local int ProfileScope::depth_ = 0;

std::string_view work_kind_name(WorkKind k) { return kNames[static_cast<size_t>(k)]; }

void Profiler::set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

void Profiler::reset() {
  for (auto& n : g_ns) n.store(0, std::memory_order_relaxed);
}

std::array<double, kNumWorkKinds> Profiler::seconds() {
  std::array<double, kNumWorkKinds> s{};
  for (size_t i = 0; i < kNumWorkKinds; ++i)
    s[i] = static_cast<double>(g_ns[i].load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

void Profiler::add(WorkKind k, int64_t ns) {
  g_ns[static_cast<size_t>(k)].fetch_add(ns, std::memory_order_relaxed);
}

}  // namespace mixtrain
