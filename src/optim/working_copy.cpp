// The working copy writer shared by the fp32 optimizers (see the header).
#include "optim/working_copy.h"

#include <string>

namespace mixtrain {

WorkingCopyOut working_copy_out(Tensor* working, int64_t flat_numel, const char* op) {
  if (!working || !working->defined()) return {};
  if (working->dtype() != DType::bf16 && working->dtype() != DType::f16)
    throw DTypeError(std::string(op) + ": the working copy must be bf16 or f16, got " +
                     std::string(dtype_name(working->dtype())));
  if (working->dim() != 1 || working->numel() > flat_numel || !working->is_contiguous())
    throw ShapeError(std::string(op) + ": the working copy " + working->to_string() +
                     " is not a flat copy of (the end of) the parameter arena of " +
                     std::to_string(flat_numel) + " elements");
  return {working->raw_data(), working->dtype(), flat_numel - working->numel()};
}

}  // namespace mixtrain
