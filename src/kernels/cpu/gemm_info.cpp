// `mixtrain info`'s GEMM line: which oneDNN implementation each input dtype gets on this machine
// (the planning itself lives in gemm_onednn.cpp, so this reports what gemm() really runs).
#include "mixtrain/kernels/gemm_info.h"

namespace mixtrain {

std::string gemm_impl_name(DType in_dtype) {
  constexpr int64_t kTypical = 256;  // large enough for oneDNN's blocked (brgemm) kernels
  return gemm_impl_for(in_dtype, in_dtype == DType::f64 ? DType::f64 : DType::f32, kTypical, kTypical,
                       kTypical);
}

}  // namespace mixtrain
