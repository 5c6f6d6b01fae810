// The number of threads every kernel uses (OpenMP and oneDNN's OpenMP runtime). Default: all
// cores (or OMP_NUM_THREADS).
#pragma once

namespace mixtrain {

// Throws ArgumentError for n < 1.
void set_num_threads(int n);
int num_threads();

}  // namespace mixtrain
