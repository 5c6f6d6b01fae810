// A kernel op, defined once (after ggml's op table): its name, its scalar reference (ref/: the
// oracle, any dtype and stride) and its implementation on each backend of this build
// (kernels/backend.h): the CPU's fast path (cpu/: it falls back to the reference itself where it
// does not apply: a dtype it has no kernel for, a layout, force_reference()) and the meta
// device's (meta/: the tracked temporaries the CPU path allocates for the same arguments,
// nothing computed). The public function (kernels/*_ops.cpp) checks the arguments and calls
// the op with the tensors' device:
//
//   const Op<void(const Tensor&, Tensor&)> ops::gelu{"gelu", ref::gelu, cpu::gelu, meta::gelu};
//   void gelu(const Tensor& x, Tensor& out) { check...; ops::gelu(x.device(), x, out); }
//
// Every op registers itself at start-up (registered_ops()); the op-harness test
// (tests/kernels/ops/) fails for an op that lacks its reference, a backend's implementation or
// its harness entry. So adding an op is: its three functions, its Op line, its harness entry.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace mixtrain {

// What the registry records of an op.
struct OpInfo {
  std::string name;
  bool has_reference = false;
  std::array<bool, kNumBackends> has_impl{};  // by BackendId
};

// Every op of this program, in registration order (static initialisation: an op is registered
// when the object file that defines it is linked in).
const std::vector<OpInfo>& registered_ops();

namespace detail {
void register_op(OpInfo info);
[[noreturn]] void throw_no_impl(const char* op, const Backend& backend);
}  // namespace detail

template <class Sig>
class Op;

template <class R, class... A>
class Op<R(A...)> {
 public:
  using Fn = R (*)(A...);

  Op(const char* name, Fn reference, Fn cpu, Fn meta) : name_(name), reference_(reference), impl_{cpu, meta} {
    detail::register_op({name, reference != nullptr, {cpu != nullptr, meta != nullptr}});
  }
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  // Runs the op on `device`'s backend (arguments already checked by the public function).
  R operator()(Device device, A... args) const {
    const Backend& b = backend_for(device);
    const Fn f = impl_[static_cast<int>(b.id)];
    if (!f) detail::throw_no_impl(name_, b);
    return f(args...);
  }
  // The scalar reference (host tensors).
  R reference(A... args) const { return reference_(args...); }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Fn reference_;
  std::array<Fn, kNumBackends> impl_;
};

}  // namespace mixtrain
