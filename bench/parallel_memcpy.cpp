// The conversion benchmark's ceiling (bench/parallel_memcpy.h).
#include "parallel_memcpy.h"

#include <cstdint>
#include <cstring>

namespace mixtrain::bench {

void parallel_memcpy(void* dst, const void* src, size_t bytes, int chunks) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static) num_threads(chunks)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t lo = bytes * static_cast<size_t>(c) / static_cast<size_t>(chunks);
    const size_t hi = bytes * static_cast<size_t>(c + 1) / static_cast<size_t>(chunks);
    std::memcpy(d + lo, s + lo, hi - lo);
  }
}

}  // namespace mixtrain::bench
