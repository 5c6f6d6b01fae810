// The fp32 master weights that an optimizer keeps for 16-bit parameters under
// UpdateRounding::master (the *-true modes with DeepSpeed's "16-bit model, fp32 master in the
// optimizer"): the optimizer's own fp32 copy of its shard (MemCategory::master_weights), updated
// in place by the fp32 kernels while the 16-bit parameters are written rounded to nearest from it
// (kernels/optimizer_kernels.h). ZeRO (optim/zero.h) shards it with the rest of the state.
#pragma once
#include <cstdint>

#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// Filled from the parameters before the first update (so weights loaded after the optimizer was
// built, --init-from, are the start) unless a checkpoint gave it.
class MasterCopy {
 public:
  // Whether an optimizer with these parameters and rounding keeps one.
  static bool wanted(DType param_dtype, UpdateRounding r) {
    return param_dtype != DType::f32 && r == UpdateRounding::master;
  }
  MasterCopy() = default;
  explicit MasterCopy(int64_t n);
  const Tensor& tensor() const { return t_; }  // undefined when not kept
  bool defined() const { return t_.defined(); }
  // The master for an update of `params` (the shard's 16-bit parameters): filled from them first
  // if nothing has filled it yet.
  Tensor& for_step(const Tensor& params);
  // A checkpoint's master (any float dtype; the caller checked the shape), or, undefined, "fill
  // from the parameters at the next update".
  void set(const Tensor& master);

 private:
  Tensor t_;
  bool filled_ = false;
};

// ShapeError unless a given master (checkpoint restore) has shape (n) when `mine` keeps one.
void check_master_shape(const MasterCopy& mine, const Tensor& given, int64_t n, const char* op);

}  // namespace mixtrain
