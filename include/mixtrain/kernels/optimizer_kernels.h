// The optimizers' update kernels over flat parameter arenas, below the optimizer classes
// (optim/adamw.h, optim/sgd.h), which compute the per-step scalars and call them through the
// backend (kernels/backend.h: Backend::adamw_update / sgd_update). Each has a scalar reference
// (_ref) and a fast version (OpenMP over fixed pieces, SIMD inside), bit-identical to it for any
// thread count: every element is independent. Formulas: optim/adamw.h, optim/sgd.h.
//
// Also here: the types those kernels take (the spans of the arena, how a 16-bit result is
// rounded back, the 16-bit working copy of fp32 master weights written in the same pass).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"
#include "mixtrain/tensor/dtype.h"

namespace mixtrain {

// How a 16-bit weight update is rounded back to 16 bits in the *-true modes (optim/lowp.h
// describes each). `master` keeps fp32 master weights and fp32 state in the optimizer (DeepSpeed's
// bf16 / fp16 optimizer) and writes the 16-bit parameters rounded to nearest from them.
enum class UpdateRounding : uint8_t { nearest, stochastic, kahan, master };
UpdateRounding parse_update_rounding(std::string_view s);  // nearest | stochastic | kahan | master
std::string_view update_rounding_name(UpdateRounding r);

// A parameter's range of the flat buffers (optim/flat_spans.h makes them from a store).
struct FlatSpan {
  int64_t offset = 0;  // in elements, into flat_params() / flat_grads() / the optimizer state
  int64_t numel = 0;
  bool decay = true;  // ParamInfo::weight_decay
};
// The same ranges cut into pieces of at most max_numel elements: the work items an OpenMP
// static schedule hands out (many small biases and a few large matrices balance out).
std::vector<FlatSpan> split_spans(const std::vector<FlatSpan>& spans, int64_t max_numel);

// How a 16-bit parameter is written back (optim/lowp.h).
struct LowpWrite {
  UpdateRounding rounding = UpdateRounding::nearest;
  uint64_t seed = 0;          // stochastic: the counter_rng stream
  uint64_t counter_base = 0;  // stochastic: flat element i draws counter_rng(seed, counter_base + i)
};

// The 16-bit working copy of fp32 master weights (optim/working_copy.h). It holds the elements
// from `begin` to the end of the kernel's flat range (the parameters autocast casts; the ones
// before, such as embedding tables autocast leaves in fp32, have no 16-bit copy): data is element
// begin's. The fp32-master kernels of the *-true modes write the 16-bit parameters through it
// whole (begin 0).
struct WorkingCopyOut {
  void* data = nullptr;  // null: no working copy is written
  DType dtype = DType::bf16;
  int64_t begin = 0;
  explicit operator bool() const { return data != nullptr; }
};
// w[offset + i] = round_to_nearest_even(p[offset + i]) for i < n where offset + i >= w.begin
// (no-op when w is empty).
void write_working_copy(const float* p, const WorkingCopyOut& w, int64_t offset, int64_t n);

// The fp32 scalars of one AdamW step, derived in double as torch derives them.
struct AdamWScalars {
  float decay_factor;     // 1 - lr*wd       (applied where the span decays)
  float beta1_weight;     // 1 - beta1       (lerp weight)
  float beta2;            // beta2
  float one_minus_beta2;  // 1 - beta2
  float bc2_sqrt;         // sqrt(1 - beta2^t)
  float eps;              // eps
  float neg_step_size;    // -lr / (1 - beta1^t)
};
// The flat kernels. p, g, m, v: (flat_numel) f32; only the elements inside `spans` are read or
// written. adamw_update_ref is the plain scalar loop (the oracle); adamw_update is the OpenMP
// (static schedule over fixed pieces) vectorisable version, bit-identical to the reference for
// any thread count. Thread count never changes a result: every element is independent.
// With a working copy (the *-mixed modes), each updated element is also rounded into it.
void adamw_update_ref(float* p, const float* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working = {});
void adamw_update(float* p, const float* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working = {});
// The fp32 master kernels (UpdateRounding::master): p (the fp32 master weights), m, v f32 as
// above; g the 16-bit gradients, each element loaded to fp32; `working` the 16-bit parameters (of
// g's type; DTypeError otherwise, ArgumentError if absent), written rounded to nearest from the
// updated master in the same pass. The master, m and v come out bit for bit as the fp32 kernel's
// on the gradients loaded to fp32. _ref: the scalar oracle; the other: OpenMP, bit-identical.
void adamw_update_ref(float* p, const bf16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working);
void adamw_update(float* p, const bf16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working);
void adamw_update_ref(float* p, const fp16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working);
void adamw_update(float* p, const fp16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working);

// The 16-bit kernels (*-true). p, g, m, v, c: (flat_numel) of one 16-bit type; c is the Kahan
// compensation, read and written only when w.rounding is kahan (ArgumentError if null then),
// otherwise it may be null. Same contract as above: _ref is the scalar oracle, the other the
// OpenMP version, bit-identical to it for any thread count.
void adamw_update_ref(bf16* p, const bf16* g, bf16* m, bf16* v, bf16* c, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const LowpWrite& w);
void adamw_update(bf16* p, const bf16* g, bf16* m, bf16* v, bf16* c, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const LowpWrite& w);
void adamw_update_ref(fp16* p, const fp16* g, fp16* m, fp16* v, fp16* c, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const LowpWrite& w);
void adamw_update(fp16* p, const fp16* g, fp16* m, fp16* v, fp16* c, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const LowpWrite& w);

// The SGD scalars of one step.
struct SgdScalars {
  float neg_lr;          // -lr
  float weight_decay;    // wd (applied where the span decays; 0 disables)
  float momentum;        // momentum (0: plain SGD, buf unused and may be null)
  float one_minus_damp;  // 1 - dampening
  bool first_step;       // buf = d instead of the momentum update
  bool nesterov;
};

// p, g, buf: (flat_numel) f32, only elements inside `spans` are touched. buf may be null when
// momentum == 0. sgd_update_ref is the plain loop, sgd_update the OpenMP vectorisable one
// (bit-identical: same operations, and the library is built without FMA contraction in
// baseline x86-64, so a vectorised loop rounds exactly like the scalar one).
// With a working copy (the *-mixed modes), each updated element is also rounded into it.
void sgd_update_ref(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const WorkingCopyOut& working = {});
void sgd_update(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working = {});
// The fp32 master kernels (UpdateRounding::master), as AdamW's: p and buf f32, g 16-bit, the
// 16-bit parameters written to `working` (g's type) rounded to nearest from the updated master.
void sgd_update_ref(float* p, const bf16* g, float* buf, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const WorkingCopyOut& working);
void sgd_update(float* p, const bf16* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working);
void sgd_update_ref(float* p, const fp16* g, float* buf, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const WorkingCopyOut& working);
void sgd_update(float* p, const fp16* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working);

// The 16-bit kernels (*-true). p, g, buf, c: (flat_numel) of one 16-bit type; buf may be null
// when momentum == 0; c is the Kahan compensation, used only when w.rounding is kahan
// (ArgumentError if null then). _ref is the scalar oracle; the other is the OpenMP version,
// bit-identical to it for any thread count.
void sgd_update_ref(bf16* p, const bf16* g, bf16* buf, bf16* c, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const LowpWrite& w);
void sgd_update(bf16* p, const bf16* g, bf16* buf, bf16* c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w);
void sgd_update_ref(fp16* p, const fp16* g, fp16* buf, fp16* c, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const LowpWrite& w);
void sgd_update(fp16* p, const fp16* g, fp16* buf, fp16* c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w);

}  // namespace mixtrain
