// fp8-mixed's hook (src/train/fp8_hooks.h).
#include "train/fp8_hooks.h"

#include <algorithm>
#include <vector>

#include "mixtrain/dist/communicator.h"

namespace mixtrain {

void Fp8UpdateHook::reduce_gradients(TrainingRun&, int64_t) {
  if (!world_ || world_->size() < 2) return;
  // Every rank's step amaxes (non-negative floats), gathered, then the max of each.
  const auto& sites = state_.sites();
  const size_t n = sites.size() * autograd::kFp8Roles;
  const int R = world_->size();
  std::vector<float> all(n * size_t(R), 0.f);
  for (size_t i = 0; i < sites.size(); ++i)
    for (int r = 0; r < autograd::kFp8Roles; ++r)
      all[size_t(world_->rank()) * n + i * autograd::kFp8Roles + size_t(r)] = sites[i]->step_amax[size_t(r)];
  std::vector<int64_t> bytes(size_t(R), int64_t(n * sizeof(float)));
  world_->all_gather(all.data(), bytes);
  for (size_t i = 0; i < sites.size(); ++i)
    for (int r = 0; r < autograd::kFp8Roles; ++r) {
      float m = 0.f;
      for (int k = 0; k < R; ++k) m = std::max(m, all[size_t(k) * n + i * autograd::kFp8Roles + size_t(r)]);
      sites[i]->step_amax[size_t(r)] = m;
    }
}

void Fp8UpdateHook::after_update(TrainingRun&, const StepRecord& r) {
  if (r.skipped) {  // the step is discarded, and its amaxes (an inf among them) with it
    for (const auto& s : state_.sites()) s->step_amax = {0.f, 0.f, 0.f};
    return;
  }
  state_.update();
}

}  // namespace mixtrain
