// The meta backend's quantization ops (kernels/quantize.h): the CPU kernels (quantize_cpu.cpp)
// allocate no tracked tensors (their fp32 staging rows are thread-local vectors, and a layout
// they do not take goes to the reference, which allocates none either); the int8 GEMM's fp32
// route does (gemm_onednn.cpp), and its planner is asked for them.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"

namespace mixtrain {

void meta::quantize_rows(const Tensor&, Tensor&, Tensor&) {}
void meta::dequantize_rows(const Tensor&, const Tensor&, Tensor&) {}
void meta::embedding_dequantized(const Tensor&, const Tensor&, const Tensor&, Tensor&) {}
void meta::gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc) { gemm_s8_workspace_only(a, b, acc); }
// fp8_cpu.cpp's per-thread amax grids are plain vectors: nothing tracked.
void meta::fp8_quantize(const Tensor&, const Fp8Quant&, const Tensor*, Tensor&, Tensor&, Tensor&) {}
void meta::fp8_quant_error(const Tensor&, const Fp8Quant&, const Tensor&, const Tensor&, Fp8ErrorStats&) {}
void meta::dequantize_gemm(const Tensor&, const Tensor&, const Tensor&, const Tensor*, Tensor&) {}
void meta::gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                               const Tensor& col_scale, const Tensor* bias, Tensor& out, bool gelu_erf) {
  gemm_s8_dequantized_workspace_only(a, b, row_scale, col_scale, bias, out, gelu_erf);
}

}  // namespace mixtrain
