// One optimizer moment (AdamW's m or v, SGD's momentum) in the precision `--optim-state` chose
// (kernels/state_kernels.h): its buffers, their bytes, the kernels' view of them and the
// checkpoint restore of a shard. Private to src/optim: AdamW and SGD keep one per moment.
//   fp32  values: (shard) f32                     bf16  values: (shard) bf16
//   int8  values: (shard) i8, the 8-bit codes' bit patterns (bitsandbytes' uint8 codes);
//         parts.absmax: (state_blocks) f32; parts.fallback: (fallback_numel) f32
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/kernels/state_kernels.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain::optim_detail {

struct Moment {
  StatePrecision precision = StatePrecision::fp32;
  Tensor values;
  QuantizedMomentParts parts;

  // Zeroed buffers for a shard of n elements laid out as `spans` (state_spans of the shard).
  static Moment zeros(StatePrecision p, const std::vector<StateSpan>& spans, int64_t n);
  bool defined() const { return values.defined(); }
  int64_t bytes() const;
  MomentBuf buf(bool is_signed, uint64_t seed);
  // The checkpoint's buffers (values, absmax, fallback) of this moment, for the shard [begin, end)
  // of an arena laid out as `whole` (one span per parameter): either the shard's own or the whole
  // arena's, whose shard part is taken. ShapeError naming `what` for any other length.
  void restore(const Tensor& values_in, const QuantizedMomentParts& parts_in,
               const std::vector<FlatSpan>& whole, int64_t begin, int64_t end, int64_t flat_numel,
               const std::string& what);
};

// f(g.data<T>()) with T the gradients' dtype: f32, or bf16 / fp16 (master rounding's 16-bit
// gradients), the element types the state kernels take.
template <class F>
void with_typed_grads(const Tensor& g, F&& f) {
  if (g.dtype() == DType::bf16)
    f(g.data<bf16>());
  else if (g.dtype() == DType::f16)
    f(g.data<fp16>());
  else
    f(g.data<float>());
}

// ArgumentError unless state of precision p can be kept for parameters of dtype `param` updated
// with rounding r (bf16 and int8 state need an fp32 update: fp32 parameters, as in 32-true and the
// *-mixed modes' masters, or 16-bit ones with master rounding's fp32 masters).
void check_state_precision(StatePrecision p, DType param, UpdateRounding r, const char* op);
// ArgumentError unless a checkpoint's state precision is this optimizer's (no conversion: the
// resumed run would not be the saved one's).
void check_state_precision_match(StatePrecision mine, const OptimizerState& s);

}  // namespace mixtrain::optim_detail
