// One optimizer moment in fp32, bf16 or int8 (optim/moment_state.h).
#include "optim/moment_state.h"

#include "mixtrain/core/error.h"
#include "optim/optim_util.h"

namespace mixtrain::optim_detail {

Moment Moment::zeros(StatePrecision p, const std::vector<StateSpan>& spans, int64_t n) {
  Moment m;
  m.precision = p;
  const MemCategory c = MemCategory::optimizer_state;
  switch (p) {
    case StatePrecision::fp32:
      m.values = Tensor::zeros({n}, DType::f32, c);
      break;
    case StatePrecision::bf16:
      m.values = Tensor::zeros({n}, DType::bf16, c);
      break;
    case StatePrecision::int8:
      m.values = Tensor::zeros({n}, DType::i8, c);
      m.parts.absmax = Tensor::zeros({state_blocks(spans)}, DType::f32, c);
      m.parts.fallback = Tensor::zeros({fallback_numel(spans)}, DType::f32, c);
      break;
  }
  return m;
}

int64_t Moment::bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&values, &parts.absmax, &parts.fallback})
    if (t->defined()) b += int64_t(t->nbytes());
  return b;
}

MomentBuf Moment::buf(bool is_signed, uint64_t seed) {
  MomentBuf b;
  b.precision = precision;
  b.is_signed = is_signed;
  b.seed = seed;
  if (values.is_meta()) return b;
  switch (precision) {
    case StatePrecision::fp32:
      b.f32 = values.data<float>();
      break;
    case StatePrecision::bf16:
      b.b16 = values.data<bf16>();
      break;
    case StatePrecision::int8:
      b.codes = static_cast<uint8_t*>(values.raw_data());
      b.absmax = parts.absmax.numel() ? parts.absmax.data<float>() : nullptr;
      b.f32 = parts.fallback.numel() ? parts.fallback.data<float>() : nullptr;
      break;
  }
  return b;
}

namespace {
// t when it has `mine` elements; its [before, before + mine) when it has `whole`; else ShapeError.
Tensor part_of(const Tensor& t, int64_t mine, int64_t before, int64_t whole, const std::string& what) {
  if (!t.defined() || t.dim() != 1)
    throw ShapeError(what + " must be a 1-D tensor of " + std::to_string(mine) + " elements, got " +
                     (t.defined() ? t.to_string() : std::string("an undefined tensor")));
  if (t.size(0) == mine) return t;
  if (t.size(0) == whole) return t.slice(0, before, before + mine);
  throw ShapeError(what + " must have " + std::to_string(mine) + " elements (or the whole arena's " +
                   std::to_string(whole) + "), got " + t.to_string());
}
}  // namespace

void Moment::restore(const Tensor& values_in, const QuantizedMomentParts& parts_in,
                     const std::vector<FlatSpan>& whole, int64_t begin, int64_t end, int64_t flat_numel,
                     const std::string& what) {
  const int64_t n = end - begin;
  const Tensor v = part_of(values_in, n, begin, flat_numel, what);
  if (precision != StatePrecision::int8) {
    values.copy_from(v);  // fp32 / bf16: any float dtype, rounded to nearest
    return;
  }
  if (v.dtype() != DType::i8) throw DTypeError(what + ": int8 state codes must be i8, got " + v.to_string());
  values.copy_from(v);
  const std::vector<StateSpan> before = state_spans(whole, 0, begin, StatePrecision::int8);
  const std::vector<StateSpan> all = state_spans(whole, 0, flat_numel, StatePrecision::int8);
  const std::vector<StateSpan> mine = state_spans(whole, begin, end, StatePrecision::int8);
  const Tensor a =
      part_of(parts_in.absmax, state_blocks(mine), state_blocks(before), state_blocks(all), what + " absmax");
  const Tensor f = part_of(parts_in.fallback, fallback_numel(mine), fallback_numel(before),
                           fallback_numel(all), what + " fallback");
  if (a.dtype() != DType::f32 || f.dtype() != DType::f32)
    throw DTypeError(what + ": int8 state's absmax and fallback must be f32");
  parts.absmax.copy_from(a);
  parts.fallback.copy_from(f);
}

void check_state_precision(StatePrecision p, DType param, UpdateRounding r, const char* op) {
  if (p != StatePrecision::fp32 && param != DType::f32 && r != UpdateRounding::master)
    throw ArgumentError(
        std::string(op) + ": optimizer state " + std::string(state_precision_name(p)) +
        " needs an fp32 update: fp32 parameters (32-true, a *-mixed mode) or master rounding; " +
        std::string(dtype_name(param)) + " parameters rounded " + std::string(update_rounding_name(r)) +
        " keep the state in their dtype");
}

void check_state_precision_match(StatePrecision mine, const OptimizerState& s) {
  if (s.state_precision != mine)
    throw ArgumentError("the optimizer state was saved in " +
                        std::string(state_precision_name(s.state_precision)) + ", this run keeps it in " +
                        std::string(state_precision_name(mine)) +
                        " (--optim-state): resume with --optim-state " +
                        std::string(state_precision_name(s.state_precision)));
}

}  // namespace mixtrain::optim_detail
