// The process-wide fp32 matmul precision (kernels/matmul_precision.h); the GEMM reads it per call
// (cpu/gemm_onednn.cpp), which also describes each setting's route (matmul_precision_route).
#include "mixtrain/kernels/matmul_precision.h"

#include <atomic>

namespace mixtrain {
namespace {
std::atomic<MatmulPrecision> g_precision{MatmulPrecision::highest};
}  // namespace

std::string_view matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::highest:
      return "highest";
    case MatmulPrecision::high:
      return "high";
    case MatmulPrecision::medium:
      return "medium";
  }
  return "?";
}

std::optional<MatmulPrecision> parse_matmul_precision(std::string_view s) {
  for (MatmulPrecision p : {MatmulPrecision::highest, MatmulPrecision::high, MatmulPrecision::medium})
    if (s == matmul_precision_name(p)) return p;
  return std::nullopt;
}

void set_float32_matmul_precision(MatmulPrecision p) { g_precision.store(p, std::memory_order_relaxed); }
MatmulPrecision float32_matmul_precision() { return g_precision.load(std::memory_order_relaxed); }

}  // namespace mixtrain
