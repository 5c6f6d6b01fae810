// The kernel thread count (OpenMP; oneDNN's OpenMP runtime follows it).
#include "mixtrain/kernels/threads.h"

#include <omp.h>

#include <atomic>
#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {
// 0 until first asked: then omp_get_max_threads() (all cores, or OMP_NUM_THREADS).
std::atomic<int> g_num_threads{0};
}  // namespace

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
