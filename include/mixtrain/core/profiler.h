// Where a training step's time goes, by kind of work (`mixtrain bench train`). Each public op
// opens a ProfileScope of its kind; only the outermost scope on a thread counts, so the GEMMs
// inside the attention op are attention time, and the rounding inside an optimizer pass is
// optimizer time. Off by default: a scope then costs one relaxed atomic load.
// A scope also counts the bytes its op must move (moves(): every input read once, every output
// written once, nothing for temporaries), again the outermost scope's only: the memory-bound
// work's floor at the machine's bandwidth (train/bench_train.h: Roofline).
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mixtrain {

enum class WorkKind : uint8_t {
  gemm,           // matmul / linear GEMMs (forward and backward)
  attention,      // the attention op (its GEMMs and softmax), causal softmax
  normalization,  // layer norm forward and backward
  elementwise,    // add, mul, scale, GELU, dropout, embedding, bias sums, head (un)shuffles
  casts,          // dtype conversions of tensors (autocast casts, gradients cast back)
  loss,           // cross-entropy forward and backward
  optimizer,      // the optimizer pass (and the 16-bit working copy it writes)
  scaler,         // unscale, non-finite check, gradient norm and clipping
  allocator,      // blocks obtained from or returned to the system
  count_,
};
constexpr size_t kNumWorkKinds = static_cast<size_t>(WorkKind::count_);
std::string_view work_kind_name(WorkKind k);

class Profiler {
 public:
  static void set_enabled(bool on);
  static bool enabled() { return enabled_.load(std::memory_order_relaxed); }
  static void reset();
  // Seconds spent in each kind since the last reset (outermost scopes, all threads).
  static std::array<double, kNumWorkKinds> seconds();
  // Bytes the outermost scopes of each kind moved since the last reset (ProfileScope::moves).
  static std::array<int64_t, kNumWorkKinds> bytes();
  static void add(WorkKind k, int64_t nanoseconds);
  static void add_bytes(WorkKind k, int64_t bytes);

 private:
  static std::atomic<bool> enabled_;
};

class ProfileScope {
 public:
  explicit ProfileScope(WorkKind k) {
    if (!Profiler::enabled()) return;
    counted_ = true;
    if (depth_++ == 0) {
      outer_ = true;
      kind_ = k;
      outer_kind_ = k;
      t0_ = std::chrono::steady_clock::now();
    }
  }
  ~ProfileScope() {
    if (!counted_) return;
    --depth_;
    if (outer_) {
      Profiler::add(
          kind_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
                     .count());
      if (bytes_ > 0) Profiler::add_bytes(kind_, bytes_);
    }
  }
  // The bytes this op reads and writes (its inputs' and outputs' sizes); counted when the scope
  // is the outermost one (an op inside another op moves nothing of its own).
  void moves(int64_t bytes) {
    if (outer_) bytes_ += bytes;
  }
  // The kind of the calling thread's outermost open scope, when profiling and one is open.
  static bool outer_kind(WorkKind& k) {
    if (depth_ == 0) return false;
    k = outer_kind_;
    return true;
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  static thread_local int depth_;  // open counted scopes on this thread
  static thread_local WorkKind outer_kind_;
  WorkKind kind_ = WorkKind::gemm;
  int64_t bytes_ = 0;
  bool counted_ = false;
  bool outer_ = false;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace mixtrain
