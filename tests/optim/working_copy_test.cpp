// The 16-bit working copy the fp32 optimizers write in the same pass as the update (the *-mixed
// modes): after every step it is exactly the round-to-nearest-even of the new fp32 parameters,
// from the fast kernels and the references alike, and the fp32 update itself is unchanged.
#include "optim/working_copy.h"

#include <gtest/gtest.h>

#include "mixtrain/core/cpu_features.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/sgd.h"
#include "optim/optim_test_util.h"

namespace mixtrain {
namespace {

using namespace testing_optim;

// Steps `opt` three times on a big store with a working copy of `dtype`, and a twin store without
// one; checks the copy against the cast of the parameters (every element inside the spans; the
// padding and frozen parts are not the optimizer's business) and the fp32 results against the twin.
// The copy may hold only the arena's end, from element `first` on (the *-mixed modes start it at
// the first parameter autocast casts).
template <class Opt, class Cfg>
void check_optimizer(const Cfg& cfg, DType dtype, bool reference, int64_t first = 0) {
  ParameterStore a = big_store(DType::f32, DType::f32), b = big_store(DType::f32, DType::f32);
  fill_params(a);
  fill_params(b);
  Opt oa(a, cfg), ob(b, cfg);
  Tensor working = Tensor::zeros({a.flat_numel() - first}, dtype);
  set_force_reference(reference);
  for (int t = 1; t <= 3; ++t) {
    fill_grads(a, t);
    fill_grads(b, t);
    oa.step(a, 0.01f, &working);
    ob.step(b, 0.01f);
  }
  set_force_reference(false);
  EXPECT_EQ(raw_bytes(a.flat_params()), raw_bytes(b.flat_params())) << "the fp32 update must not change";
  const Tensor expected = a.flat_params().to(dtype);
  int64_t checked = 0;
  for (const ParamInfo& info : a.infos())
    for (int64_t i = std::max(info.offset, first); i < info.offset + info.numel; ++i, ++checked)
      ASSERT_EQ(get_flat(working, i - first), get_flat(expected, i)) << dtype_name(dtype) << " element " << i;
  EXPECT_GT(checked, 16384);  // more than one OpenMP piece
}

// A first element inside a parameter and inside an OpenMP piece: the piece straddling it writes
// only its part from `first` on.
TEST(WorkingCopy, ACopyOfTheArenasEndIsWrittenFromItsFirstElement) {
  ParameterStore probe = big_store(DType::f32, DType::f32);
  const int64_t first = probe.infos()[0].offset + 5001;  // inside w (67 x 301), in the first piece
  for (bool ref : {false, true}) {
    check_optimizer<AdamW>(AdamWConfig{}, DType::bf16, ref, first);
    SgdConfig c;
    c.momentum = 0.9f;
    check_optimizer<SGD>(c, DType::f16, ref, first);
  }
}

TEST(WorkingCopy, AdamWWritesTheRoundedParameters) {
  for (DType dt : {DType::bf16, DType::f16})
    for (bool ref : {false, true}) check_optimizer<AdamW>(AdamWConfig{}, dt, ref);
}

TEST(WorkingCopy, SgdWritesTheRoundedParameters) {
  SgdConfig c;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  for (DType dt : {DType::bf16, DType::f16})
    for (bool ref : {false, true}) check_optimizer<SGD>(c, dt, ref);
}

TEST(WorkingCopy, BadCopiesAreRefused) {
  ParameterStore s = small_store();
  fill_params(s);
  fill_grads(s, 1);
  AdamW opt(s);
  Tensor f32 = Tensor::zeros({s.flat_numel()}, DType::f32);
  expect_throw<DTypeError>([&] { opt.step(s, 0.01f, &f32); });
  Tensor long_copy = Tensor::zeros({s.flat_numel() + 1}, DType::bf16);
  expect_throw<ShapeError>([&] { opt.step(s, 0.01f, &long_copy); });
  Tensor square = Tensor::zeros({1, s.flat_numel()}, DType::bf16);
  expect_throw<ShapeError>([&] { opt.step(s, 0.01f, &square); });
  ParameterStore s16 = small_store(DType::bf16, DType::bf16);
  AdamW opt16(s16);
  Tensor copy = Tensor::zeros({s16.flat_numel()}, DType::bf16);
  expect_throw<ArgumentError>([&] { opt16.step(s16, 0.01f, &copy); });
  EXPECT_EQ(opt.steps(), 0);
}

}  // namespace
}  // namespace mixtrain
