// The fp8 advice's bounds (mixtrain/train/fp8_advice.h).
#include "mixtrain/train/fp8_advice.h"

namespace mixtrain {

std::vector<std::string> Fp8SiteAdvice::over_bound(Fp8Recipe r, bool hybrid) const {
  std::vector<std::string> v;
  auto check = [&](Fp8Slot s, const char* role) {
    const double bound = s == Fp8Slot::grad_e5m2 ? kFp8ErrorBoundE5m2 : kFp8ErrorBoundE4m3;
    const Fp8ErrorStats& e = at(r, s);
    if (e.count > 0 &&
        !(e.relative_error() <= bound &&
          static_cast<double>(e.underflow) <= kFp8UnderflowBound * static_cast<double>(e.count)))
      v.push_back(role);
  };
  check(Fp8Slot::input, "input");
  check(Fp8Slot::weight, "weight");
  check(hybrid ? Fp8Slot::grad_e5m2 : Fp8Slot::grad_e4m3, "grad_output");
  return v;
}

}  // namespace mixtrain
