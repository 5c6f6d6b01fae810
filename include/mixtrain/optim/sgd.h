// SGD with momentum over the flat parameter arena: the same update as torch.optim.SGD
// (maximize=False, the single-tensor path), one pass over flat_params() / flat_grads() with one
// flat fp32 momentum buffer of the same layout.
//
// Per element, in torch's order (every operation rounds to fp32):
//   d = g + wd * p                     L2 weight decay, only where ParamInfo::weight_decay
//   first step:  buf = d               torch: buf = torch.clone(grad)
//   later steps: buf = buf * momentum + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf     (when momentum != 0)
//   p = p + (-lr) * d
// torch's AVX2 add(alpha=...) fuses its multiply-add, so results can differ from torch's by 1 ulp.
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/nn/parameters.h"
#include "mixtrain/optim/flat_spans.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct SgdConfig {
  float lr = 1e-3f;  // used by step(store); step(store, lr) overrides it
  float momentum = 0.f;
  float dampening = 0.f;
  float weight_decay = 0.f;
  bool nesterov = false;
};
// Throws ArgumentError unless lr, momentum, dampening, weight_decay are >= 0 and finite, and
// nesterov has momentum > 0 and dampening == 0 (torch's rule).
void validate(const SgdConfig& config);

struct SgdScalars {
  float neg_lr;           // -lr
  float weight_decay;     // wd (applied where the span decays; 0 disables)
  float momentum;         // momentum (0: plain SGD, buf unused and may be null)
  float one_minus_damp;   // 1 - dampening
  bool first_step;        // buf = d instead of the momentum update
  bool nesterov;
};

// p, g, buf: (flat_numel) f32, only elements inside `spans` are touched. buf may be null when
// momentum == 0. sgd_update_ref is the plain loop, sgd_update the OpenMP vectorisable one
// (bit-identical: same operations, and the library is built without FMA contraction in
// baseline x86-64, so a vectorised loop rounds exactly like the scalar one).
void sgd_update_ref(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s);
void sgd_update(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s);

class SGD {
 public:
  SGD(const ParameterStore& store, SgdConfig config = {});

  // One update with learning rate lr (>= 0, finite); f32 parameters and gradients (DTypeError).
  void step(ParameterStore& store, float lr);
  void step(ParameterStore& store) { step(store, config_.lr); }

  const SgdConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }
  // (flat_numel) f32; undefined when momentum == 0 (torch keeps no buffer either).
  const Tensor& momentum_buffer() const { return buf_; }
  // Checkpoint restore; momentum_buffer must be (flat_numel) when momentum != 0 (ShapeError),
  // and is ignored otherwise.
  void set_state(int64_t steps, const Tensor& momentum_buffer);

 private:
  SgdConfig config_;
  int64_t flat_numel_ = 0;
  std::vector<FlatSpan> spans_;
  int64_t steps_ = 0;
  Tensor buf_;  // (flat_numel) f32 momentum buffer
};

}  // namespace mixtrain
