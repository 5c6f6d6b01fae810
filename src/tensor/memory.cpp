// Memory tracker: process-wide live/peak byte counters per category.
#include "mixtrain/tensor/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "mixtrain/tensor/device.h"

namespace mixtrain {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::parameters:
      return "parameters";
    case MemCategory::master_weights:
      return "master_weights";
    case MemCategory::gradients:
      return "gradients";
    case MemCategory::optimizer_state:
      return "optimizer_state";
    case MemCategory::activations:
      return "activations";
    case MemCategory::workspace:
      return "workspace";
    case MemCategory::cast_cache:
      return "cast_cache";
    case MemCategory::quantized_weights:
      return "quantized_weights";
    case MemCategory::fp8:
      return "fp8";
    case MemCategory::data:
      return "data";
    case MemCategory::other:
      return "other";
    case MemCategory::count_:
      break;
  }
  return "?";
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker t;
  return t;
}

MemoryTracker& MemoryTracker::meta() {
  static MemoryTracker t;
  return t;
}

MemoryTracker& MemoryTracker::current() { return default_device().is_meta() ? meta() : global(); }

bool MemoryTracker::raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t cur = peak.load(std::memory_order_relaxed);
  while (value > cur)
    if (peak.compare_exchange_weak(cur, value, std::memory_order_relaxed)) return true;
  return false;
}

void MemoryTracker::record_at_peak(int64_t total) {
  const std::lock_guard<std::mutex> lock(at_peak_mutex_);
  if (total < at_peak_total_) return;  // a higher peak was recorded meanwhile
  at_peak_total_ = total;
  for (size_t i = 0; i < kNumMemCategories; ++i) at_peak_[i] = live_[i].load(std::memory_order_relaxed);
}

void MemoryTracker::on_allocate(MemCategory c, size_t bytes) {
  const auto i = static_cast<size_t>(c);
  const auto b = static_cast<int64_t>(bytes);
  raise_peak(peak_[i], live_[i].fetch_add(b, std::memory_order_relaxed) + b);
  const int64_t total = live_total_.fetch_add(b, std::memory_order_relaxed) + b;
  if (raise_peak(peak_total_, total)) record_at_peak(total);
  allocations_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryTracker::on_free(MemCategory c, size_t bytes) {
  const auto b = static_cast<int64_t>(bytes);
  live_[static_cast<size_t>(c)].fetch_sub(b, std::memory_order_relaxed);
  live_total_.fetch_sub(b, std::memory_order_relaxed);
}

MemorySnapshot MemoryTracker::snapshot() const {
  MemorySnapshot s;
  for (size_t i = 0; i < kNumMemCategories; ++i) {
    s.live[i] = live_[i].load(std::memory_order_relaxed);
    s.peak[i] = peak_[i].load(std::memory_order_relaxed);
  }
  s.live_total = live_total_.load(std::memory_order_relaxed);
  s.peak_total = peak_total_.load(std::memory_order_relaxed);
  s.allocations = allocations_.load(std::memory_order_relaxed);
  const std::lock_guard<std::mutex> lock(at_peak_mutex_);
  s.at_peak = at_peak_;
  return s;
}

void MemoryTracker::reset_peaks() {
  for (size_t i = 0; i < kNumMemCategories; ++i) peak_[i].store(live_[i].load());
  peak_total_.store(live_total_.load());
  allocations_.store(0);
  record_at_peak_reset();
}

void MemoryTracker::record_at_peak_reset() {
  const std::lock_guard<std::mutex> lock(at_peak_mutex_);
  at_peak_total_ = 0;
  for (size_t i = 0; i < kNumMemCategories; ++i) at_peak_[i] = live_[i].load(std::memory_order_relaxed);
}

int64_t process_peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

bool reset_process_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool wrote = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && wrote;
}

ProcessMemory process_memory_at_start() {
  ProcessMemory m;
  const int64_t rss = process_current_rss_bytes();
  if (rss >= 0) m.fixed_bytes = std::max<int64_t>(0, rss - MemoryTracker::global().snapshot().live_total);
  m.peak_from_start = reset_process_peak_rss();
  return m;
}

void process_memory_at_end(ProcessMemory& m) { m.peak_rss_bytes = process_peak_rss_bytes(); }

int64_t process_current_rss_bytes() {
  // /proc/self/statm: size resident shared text lib data dt (in pages)
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  if (got != 2) return -1;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

}  // namespace mixtrain
