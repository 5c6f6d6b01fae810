// The precision of fp32 GEMMs, PyTorch's torch.set_float32_matmul_precision: a process-wide
// setting that every GEMM with fp32 inputs reads (the 32-true mode's, and the fp32-policy GEMMs of
// the mixed modes; 16-bit GEMMs are what autocast made them). A training run sets it from its
// options (RunOptions::matmul_precision, --matmul-precision) for the run's duration.
//   highest  fp32 arithmetic (the default, as PyTorch's)
//   high     PyTorch: TF32 or bf16x3 where the hardware has a fast kernel for it. oneDNN has
//            neither for fp32 matmul on CPUs, so here it runs as highest (matmul_precision_route
//            says so, and a run warns)
//   medium   bf16 products with fp32 accumulation where the library runs them on bf16 units:
//            oneDNN's fpmath mode bf16 (as PyTorch's torch.backends.mkldnn fp32 precision "bf16"),
//            which oneDNN 3.x implements on AMX; elsewhere (AVX512-BF16 without AMX, and oneDNN
//            2.x everywhere) oneDNN keeps the fp32 kernel and the result is highest's
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace mixtrain {

enum class MatmulPrecision { highest, high, medium };

std::string_view matmul_precision_name(MatmulPrecision p);                  // "highest", "high", "medium"
std::optional<MatmulPrecision> parse_matmul_precision(std::string_view s);  // nullopt for anything else

void set_float32_matmul_precision(MatmulPrecision p);
MatmulPrecision float32_matmul_precision();

// Sets p for a scope and restores the previous setting at its end.
class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision p) : saved_(float32_matmul_precision()) {
    set_float32_matmul_precision(p);
  }
  ~MatmulPrecisionScope() { set_float32_matmul_precision(saved_); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision saved_;
};

// What an fp32 GEMM runs as under p on this machine and build, e.g. "fp32 (brg:avx512_core)",
// "bf16 products (oneDNN fpmath mode bf16: brg:avx512_core_amx)", or "fp32 (brg:avx512_core): oneDNN
// keeps the fp32 kernel for fpmath mode bf16 on this CPU". Whether the route rounds to bf16:
bool matmul_precision_uses_bf16(MatmulPrecision p);
std::string matmul_precision_route(MatmulPrecision p);

}  // namespace mixtrain
