// Gradient norm and clipping over the flat gradient buffer, with the semantics of
// torch.nn.utils.clip_grad_norm_ (norm_type=2, error_if_nonfinite=False).
//
// The norm is sqrt(sum of g^2) over every gradient element (alignment padding is zero and adds
// nothing). Squares are accumulated in fp32 inside fixed 4096-element blocks of the flat buffer
// (16 lanes, a fixed combining tree), the block sums are added in double in block order, and the
// square root is taken in double. So the result does not depend on the thread count, and it is
// at least as accurate as torch's (fp32 per-tensor norms, then an fp32 norm of the norms): the two
// agree to a few fp32 ulps. A NaN gradient gives NaN; an infinite one (or squares past fp32's
// range, |g| > ~1.8e19) gives inf, as in torch.
#pragma once
#include <cstdint>

#include "mixtrain/nn/parameters.h"

namespace mixtrain {

// The global L2 norm of every gradient (flat_grads() must be f32: DTypeError otherwise).
double grad_global_norm(const ParameterStore& store);

// torch semantics: total = grad_global_norm; clip_coef = max_norm / (total + 1e-6); if
// clip_coef < 1 every gradient is multiplied by clip_coef (rounded to fp32). Returns the norm
// before clipping. A non-finite norm is returned as is and the gradients are left untouched
// (the caller reports it / skips the step). max_norm must be > 0 and finite (ArgumentError).
double clip_grad_norm(ParameterStore& store, double max_norm);

// The same for gradients of any float dtype: fp32 through the fused blocked kernel above, 16-bit
// (the *-true modes) through the generic reduction and scale kernels.
double grad_norm_any_dtype(const ParameterStore& store);
double clip_grad_norm_any_dtype(ParameterStore& store, double max_norm);

}  // namespace mixtrain
