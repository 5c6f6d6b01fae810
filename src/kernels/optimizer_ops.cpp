// The flat-arena ops (kernels/optimizer_ops.h): their reference, CPU and meta implementations.
#include "kernels/optimizer_ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/meta/meta_ops.h"

namespace mixtrain::ops {

const Op<void(Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, const std::vector<FlatSpan>&,
              const AdamWScalars&, const LowpWrite&, const WorkingCopyOut&)>
    adamw_update{"adamw_update", ref::adamw_update, cpu::adamw_update, meta::adamw_update};
const Op<void(Tensor&, const Tensor&, Tensor&, Tensor&, const std::vector<FlatSpan>&, const SgdScalars&,
              const LowpWrite&, const WorkingCopyOut&)>
    sgd_update{"sgd_update", ref::sgd_update, cpu::sgd_update, meta::sgd_update};
const Op<UnscaleResult(Tensor&, float)> unscale_and_check{"unscale_and_check", ref::unscale_and_check,
                                                          cpu::unscale_and_check, meta::unscale_and_check};
const Op<double(const Tensor&)> global_norm{"global_norm", ref::global_norm, cpu::global_norm,
                                            meta::global_norm};

}  // namespace mixtrain::ops
