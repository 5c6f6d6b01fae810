// What this machine can do at most, for the roofline of a training step (train/bench_train.h: Roofline):
// the memory bandwidth measured now (a STREAM triad), and the matrix arithmetic's nominal peak
// from the ISA (flops per cycle per core for the dtype's fastest route, times cores and clock).
//
//   const double bw = measure_triad_bytes_per_s(0.3);            // bytes/s, all threads
//   const IsaPeak pk = isa_peak(DType::bf16);                    // pk.flops_per_s(num_threads())
#pragma once
#include <cstdint>
#include <string>

#include "mixtrain/tensor/dtype.h"

namespace mixtrain {

// STREAM's triad a[i] = b[i] + s * c[i] over three fp32 arrays of `bytes_per_array` each (default
// 64 MiB: several times any last-level cache here), on num_threads() threads; the best pass over
// about `seconds`, counted as STREAM counts it (3 x 4 bytes per element: the write-allocate read
// left out). Bytes per second.
double measure_triad_bytes_per_s(double seconds, int64_t bytes_per_array = int64_t{64} << 20);

// The nominal peak of a GEMM whose inputs are `dtype` on this CPU, per core and cycle, with what
// it is based on ("AMX-BF16 tiles: 1024 bf16 flops/cycle", "AVX2 FMA, 2 x 256-bit: 32 fp32
// flops/cycle", ...). The clock is /proc/cpuinfo's "cpu MHz" (nominal in a virtual machine; turbo
// or a throttled core differ); 0 where it is missing.
struct IsaPeak {
  double flops_per_cycle = 0;  // per core
  double ghz = 0;
  std::string basis;
  double flops_per_s(int cores) const { return flops_per_cycle * ghz * 1e9 * cores; }
};
IsaPeak isa_peak(DType dtype);

}  // namespace mixtrain
