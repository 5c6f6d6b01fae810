// The 16-bit optimizer writes' argument checks (kernels/cpu/lowp_span.h).
#include "kernels/cpu/lowp_span.h"

#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain {

namespace optim_detail {

void check_lowp_write(const void* c, const LowpWrite& w, const char* op) {
  if (w.rounding == UpdateRounding::kahan && c == nullptr)
    throw ArgumentError(std::string(op) + ": kahan rounding needs a compensation buffer");
  if (w.rounding == UpdateRounding::master)
    throw ArgumentError(std::string(op) +
                        ": master rounding updates fp32 master weights (the fp32 kernel with 16-bit "
                        "gradients), not the 16-bit parameters in place");
}

void check_master_out(const WorkingCopyOut& working, DType grad_dtype, const char* op) {
  if (!working || working.begin != 0)
    throw ArgumentError(std::string(op) +
                        ": fp32 master weights with 16-bit gradients need the 16-bit parameters "
                        "to write (the working copy), all of them");
  if (working.dtype != grad_dtype)
    throw DTypeError(std::string(op) + ": the 16-bit parameters are " +
                     std::string(dtype_name(working.dtype)) + ", the gradients " +
                     std::string(dtype_name(grad_dtype)));
}

}  // namespace optim_detail

}  // namespace mixtrain
