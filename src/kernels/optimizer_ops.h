// The ops over flat parameter and gradient arenas (kernels/op.h), called by the optimizers
// (optim/adamw.cpp, optim/sgd.cpp), the loss scaler (amp/grad_scaler.cpp) and the clipping
// (optim/clip.cpp) with their own argument checks.
//
// adamw_update, sgd_update: p, g, the state (m, v / buf) and c are (flat_numel) contiguous
// tensors of one dtype, f32, bf16 or f16 (g may be 16-bit under f32 masters); buf is undefined
// when SGD has no momentum, c unless 16-bit kahan rounding; `w` applies to 16-bit parameters,
// `working` (fp32 only) receives the 16-bit working copy (kernels/optimizer_kernels.h).
// unscale_and_check, global_norm: a contiguous f32 gradient (kernels/gradient_kernels.h).
#pragma once
#include <vector>

#include "kernels/gradient_kernels.h"
#include "kernels/op.h"
#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

namespace ops {
extern const Op<void(Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, const std::vector<FlatSpan>&,
                     const AdamWScalars&, const LowpWrite&, const WorkingCopyOut&)>
    adamw_update;
extern const Op<void(Tensor&, const Tensor&, Tensor&, Tensor&, const std::vector<FlatSpan>&,
                     const SgdScalars&, const LowpWrite&, const WorkingCopyOut&)>
    sgd_update;
extern const Op<UnscaleResult(Tensor&, float)> unscale_and_check;
extern const Op<double(const Tensor&)> global_norm;
}  // namespace ops

namespace ref {
// The scalar references of the four (the _ref loops of optimizer_kernels.h and gradient_kernels.h).
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                  const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                  const WorkingCopyOut& working);
void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working);
UnscaleResult unscale_and_check(Tensor& g, float inv_scale);
double global_norm(const Tensor& g);
}  // namespace ref

}  // namespace mixtrain
