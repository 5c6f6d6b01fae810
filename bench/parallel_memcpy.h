// The conversion benchmark's ceiling: memcpy of a buffer split over the threads the conversions
// use (`mixtrain bench convert`). A yardstick, outside the engine (mixtrain_bench_yardstick).
#pragma once
#include <cstddef>

namespace mixtrain::bench {

// Copies `bytes` bytes from src to dst in `chunks` contiguous pieces, one OpenMP iteration each.
void parallel_memcpy(void* dst, const void* src, size_t bytes, int chunks);

}  // namespace mixtrain::bench
