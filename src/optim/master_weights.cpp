// The fp32 master weights of master rounding (optim/master_weights.h).
#include "mixtrain/optim/master_weights.h"

#include <string>

#include "mixtrain/core/error.h"
#include "tensor/alloc_site.h"

namespace mixtrain {

MasterCopy::MasterCopy(int64_t n) {
  const ScopedOp site("fp32 master weights (optimizer)");  // names them in memory reports
  t_ = Tensor::empty({n}, DType::f32, MemCategory::master_weights);
}

Tensor& MasterCopy::for_step(const Tensor& params) {
  if (!filled_) t_.copy_from(params);  // 16-bit values are exact in fp32
  filled_ = true;
  return t_;
}

void check_master_shape(const MasterCopy& mine, const Tensor& given, int64_t n, const char* op) {
  if (mine.defined() && given.defined() && given.shape() != Shape{n})
    throw ShapeError(std::string(op) + ": master weights must have shape (" + std::to_string(n) + "), got " +
                     given.to_string());
}

void MasterCopy::set(const Tensor& master) {
  filled_ = master.defined();
  if (filled_) t_.copy_from(master);
}

}  // namespace mixtrain
