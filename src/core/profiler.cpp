// The step-time profiler's counters (see the header).
#include "mixtrain/core/profiler.h"

namespace mixtrain {
namespace {
std::array<std::atomic<int64_t>, kNumWorkKinds> g_ns{};
std::array<std::atomic<int64_t>, kNumWorkKinds> g_bytes{};
constexpr std::array<std::string_view, kNumWorkKinds> kNames = {
    "gemm", "attention", "normalization", "elementwise", "casts", "loss", "optimizer", "scaler", "allocator"};
}  // namespace

std::atomic<bool> Profiler::enabled_{false};
thread_local int ProfileScope::depth_ = 0;
thread_local WorkKind ProfileScope::outer_kind_ = WorkKind::gemm;

std::string_view work_kind_name(WorkKind k) { return kNames[static_cast<size_t>(k)]; }

void Profiler::set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

void Profiler::reset() {
  for (auto& n : g_ns) n.store(0, std::memory_order_relaxed);
  for (auto& n : g_bytes) n.store(0, std::memory_order_relaxed);
}

std::array<int64_t, kNumWorkKinds> Profiler::bytes() {
  std::array<int64_t, kNumWorkKinds> b{};
  for (size_t i = 0; i < kNumWorkKinds; ++i) b[i] = g_bytes[i].load(std::memory_order_relaxed);
  return b;
}

void Profiler::add_bytes(WorkKind k, int64_t bytes) {
  g_bytes[static_cast<size_t>(k)].fetch_add(bytes, std::memory_order_relaxed);
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
