// Internal: runs a single-threaded conversion kernel over a large array in OpenMP chunks.
// Below the threshold the fork/join costs more than the conversion, so it stays serial.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mixtrain::detail {

inline constexpr size_t kParallelMinElements = size_t{1} << 16;
inline constexpr size_t kChunkElements = size_t{1} << 14;  // a multiple of every SIMD width

template <class Src, class Dst, class Kernel>
void run_chunked(const Src* src, Dst* dst, size_t n, Kernel kernel) {
  if (n < kParallelMinElements) {
    kernel(src, dst, n);
    return;
  }
  const int64_t chunks = int64_t((n + kChunkElements - 1) / kChunkElements);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * kChunkElements;
    kernel(src + begin, dst + begin, std::min(kChunkElements, n - begin));
  }
}

}  // namespace mixtrain::detail
