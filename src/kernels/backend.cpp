// Backend lookup by device, and the kernel thread count (OpenMP; oneDNN's OpenMP runtime follows
// it). Only the CPU backend exists in this build.
#include "mixtrain/kernels/backend.h"

#include <omp.h>

#include <atomic>
#include <string>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/meta/meta_backend.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {
// 0 until first asked: then omp_get_max_threads() (all cores, or OMP_NUM_THREADS).
std::atomic<int> g_num_threads{0};
}  // namespace

CpuBackend& CpuBackend::instance() {
  static CpuBackend backend;
  return backend;
}

Backend& backend_for(Device device) {
  if (device.type == DeviceType::cpu) return CpuBackend::instance();
  if (device.type == DeviceType::meta) return MetaBackend::instance();
  throw ArgumentError("no backend for device " + device.to_string() + " in this build");
}

void set_num_threads(int n) {
  if (n < 1) throw ArgumentError("set_num_threads: thread count " + std::to_string(n) + " must be >= 1");
  g_num_threads.store(n);
  omp_set_num_threads(n);
}

int num_threads() {
  int n = g_num_threads.load();
  if (n == 0) {
    n = omp_get_max_threads();
    int expected = 0;
    if (!g_num_threads.compare_exchange_strong(expected, n)) n = expected;
  }
  return n;
}

}  // namespace mixtrain
