// Memory accounting: every byte of tensor storage is charged to one category, and live and peak
// bytes are tracked per category and in total. The memory report and benchmarks read this.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace mixtrain {

enum class MemCategory : uint8_t {
  parameters,         // model weights in their working dtype
  master_weights,     // fp32 copies of 16-bit parameters (mixed precision)
  gradients,          // parameter gradients
  optimizer_state,    // AdamW moments, momentum buffers, compensation buffers
  activations,        // forward outputs saved for backward
  workspace,          // temporaries freed within one op or one step
  cast_cache,         // autocast's cached low-precision copies of weights
  quantized_weights,  // int8 / E4M3 weight codes and their fp32 scales (quantized inference)
  fp8,                // fp8-mixed: quantized operands kept for backward, the amax histories
  data,               // token batches, host buffers
  other,
  count_,
};
constexpr size_t kNumMemCategories = static_cast<size_t>(MemCategory::count_);
std::string_view mem_category_name(MemCategory c);

struct MemorySnapshot {
  std::array<int64_t, kNumMemCategories> live{};
  std::array<int64_t, kNumMemCategories> peak{};
  int64_t live_total = 0;
  int64_t peak_total = 0;  // peak of the sum (not the sum of per-category peaks)
  // What made up peak_total: the live bytes by category when the total last rose to it (an
  // allocation on another thread may land between the two reads: off by at most that block).
  std::array<int64_t, kNumMemCategories> at_peak{};
  int64_t allocations = 0;  // number of allocate() calls since start (or since reset_peaks)
};

// Process-wide counters, one tracker per device (atomics: allocation can happen from any thread).
class MemoryTracker {
 public:
  static MemoryTracker& global();  // the CPU's
  static MemoryTracker& meta();    // the meta device's (tensor/device.h): predicted, not held
  // The tracker of the default device (tensor/device.h: DeviceScope), which is what a run reports.
  static MemoryTracker& current();
  void on_allocate(MemCategory c, size_t bytes);
  void on_free(MemCategory c, size_t bytes);
  MemorySnapshot snapshot() const;
  // Peaks restart from the current live values (e.g. to measure one phase).
  void reset_peaks();

 private:
  static bool raise_peak(std::atomic<int64_t>& peak, int64_t value);
  void record_at_peak(int64_t total);
  void record_at_peak_reset();
  std::array<std::atomic<int64_t>, kNumMemCategories> live_{};
  std::array<std::atomic<int64_t>, kNumMemCategories> peak_{};
  std::atomic<int64_t> live_total_{0};
  std::atomic<int64_t> peak_total_{0};
  std::atomic<int64_t> allocations_{0};
  mutable std::mutex at_peak_mutex_;  // a new total peak is rare after the first steps
  int64_t at_peak_total_ = 0;
  std::array<int64_t, kNumMemCategories> at_peak_{};
};

// The process's own peak resident set size in bytes (getrusage), for cross-checking.
int64_t process_peak_rss_bytes();
int64_t process_current_rss_bytes();
// Restarts the process's resident high-water mark (VmHWM, what process_peak_rss_bytes reads) from
// its current resident size: Linux's /proc/self/clear_refs "5". False where that is not allowed.
bool reset_process_peak_rss();

// What the process holds beside the tracked tensors over one run (train/recipe.h fills it): the
// resident bytes at the run's start less the tensors tracked then (the binary, its libraries, the
// tokenizer, the data read), and the resident high-water mark from then on.
struct ProcessMemory {
  int64_t fixed_bytes = -1;      // -1: not measured (a prediction on the meta device)
  int64_t peak_rss_bytes = -1;   // VmHWM at the run's end
  bool peak_from_start = false;  // false: the high-water mark could not be restarted (the process's)
};
ProcessMemory process_memory_at_start();  // measures the fixed size, restarts the peak
void process_memory_at_end(ProcessMemory& m);

}  // namespace mixtrain
