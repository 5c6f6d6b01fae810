// ParameterStore: one flat buffer for parameters and one for gradients, with named views.
#include "mixtrain/nn/parameters.h"

#include <cstring>

#include "tensor/alloc_site.h"

namespace mixtrain {

namespace {
constexpr int64_t kParamAlign = 16;  // elements
thread_local GradientPartScope::PartFn t_gradient_part;
thread_local bool t_parameters_too = false;
}  // namespace

GradientPartScope::GradientPartScope(PartFn part, bool parameters_too)
    : prev_(std::move(t_gradient_part)), prev_parameters_(t_parameters_too) {
  t_gradient_part = std::move(part);
  t_parameters_too = parameters_too;
}
GradientPartScope::~GradientPartScope() {
  t_gradient_part = std::move(prev_);
  t_parameters_too = prev_parameters_;
}

void ParameterStore::declare(const std::string& name, const Shape& shape, bool weight_decay) {
  if (finalized()) throw ArgumentError("ParameterStore::declare: '" + name + "' declared after finalize()");
  if (by_name_.count(name))
    throw ArgumentError("ParameterStore::declare: duplicate parameter '" + name + "'");
  ParamInfo p;
  p.name = name;
  p.shape = shape;
  p.numel = shape.numel();
  p.offset = flat_numel_;
  p.weight_decay = weight_decay;
  flat_numel_ += (p.numel + kParamAlign - 1) / kParamAlign * kParamAlign;
  by_name_[name] = infos_.size();
  infos_.push_back(p);
}

void ParameterStore::finalize(DType dtype, DType grad_dtype, MemCategory category,
                              const QuantizedLayout& quantized, bool gradients) {
  if (finalized()) throw ArgumentError("ParameterStore::finalize: called twice");
  int64_t code_numel = 0, scale_numel = 0;
  if (!quantized.empty()) {
    if (quantized.scheme == QuantScheme::none)
      throw ArgumentError("ParameterStore::finalize: quantized parameters need a scheme");
    for (const std::string& n : quantized.names) {
      if (!by_name_.count(n))
        throw ArgumentError("ParameterStore::finalize: no parameter named '" + n + "' to quantize");
      if (infos_[by_name_.at(n)].shape.size() != 2)
        throw ArgumentError("ParameterStore::finalize: '" + n + "' " +
                            infos_[by_name_.at(n)].shape.to_string() +
                            " is not a matrix (only 2-D parameters are quantized, one scale per row)");
    }
    // Lay the flat buffers out again without the quantized parameters.
    flat_numel_ = 0;
    for (ParamInfo& p : infos_) {
      p.quantized = quantized.names.count(p.name) > 0;
      if (p.quantized) {
        p.offset = code_numel;
        p.scale_offset = scale_numel;
        code_numel += (p.numel + 63) / 64 * 64;
        scale_numel += (p.shape[0] + kParamAlign - 1) / kParamAlign * kParamAlign;
      } else {
        p.offset = flat_numel_;
        flat_numel_ += (p.numel + kParamAlign - 1) / kParamAlign * kParamAlign;
      }
    }
    quant_scheme_ = quantized.scheme;
  }
  const ScopedOp site("flat arena");  // names the arenas in memory reports
  grad_part_ = param_part_ = {0, flat_numel_};
  std::pair<int64_t, int64_t> part = grad_part_;
  if (gradients && t_gradient_part) {
    part = t_gradient_part(flat_numel_);
    const auto [b, e] = part;
    if (b < 0 || b > e || e > flat_numel_)
      throw ArgumentError("ParameterStore::finalize: gradient part [" + std::to_string(b) + ", " +
                          std::to_string(e) + ") outside the arena of " + std::to_string(flat_numel_));
  }
  if (gradients && t_gradient_part && t_parameters_too && quant_scheme_ == QuantScheme::none) {
    param_part_ = part;
    params_ = Tensor::reserved({flat_numel_}, dtype, part.first, part.second, category);
  } else {
    params_ = Tensor::zeros({flat_numel_}, dtype, category);
  }
  if (gradients && t_gradient_part) {
    grad_part_ = part;
    const auto [b, e] = grad_part_;
    grads_ = Tensor::reserved({flat_numel_}, grad_dtype, b, e, MemCategory::gradients);
  } else if (gradients) {
    grads_ = Tensor::zeros({flat_numel_}, grad_dtype, MemCategory::gradients);
  }
  if (quant_scheme_ != QuantScheme::none) {
    codes_ = Tensor::zeros({code_numel}, quant_code_dtype(quant_scheme_), MemCategory::quantized_weights);
    scales_ = Tensor::zeros({scale_numel}, DType::f32, MemCategory::quantized_weights);
  }
}

void ParameterStore::mark_written() const {
  for (const Tensor* t : {&params_, &codes_, &scales_})
    if (t->defined()) t->storage()->bump_version();
}

QuantizedTensor ParameterStore::quantized(size_t i) const {
  if (!finalized()) throw ArgumentError("ParameterStore::quantized: not finalized");
  const ParamInfo& p = infos_.at(i);
  if (!p.quantized) throw ArgumentError("ParameterStore: parameter '" + p.name + "' is not quantized");
  QuantizedTensor q;
  q.scheme = quant_scheme_;
  q.codes = codes_.slice(0, p.offset, p.offset + p.numel).reshape(p.shape);
  q.scale = scales_.slice(0, p.scale_offset, p.scale_offset + p.shape[0]);
  return q;
}

int64_t ParameterStore::numel() const {
  int64_t n = 0;
  for (const auto& p : infos_) n += p.numel;
  return n;
}

int64_t ParameterStore::flat_numel() const { return flat_numel_; }

std::pair<int64_t, int64_t> ParameterStore::range_of(const std::string& prefix) const {
  int64_t b = -1, e = -1;
  size_t count = 0;
  for (size_t i = 0; i < infos_.size(); ++i) {
    const ParamInfo& p = infos_[i];
    if (p.name.compare(0, prefix.size(), prefix) != 0) continue;
    const int64_t end = i + 1 < infos_.size() ? infos_[i + 1].offset : flat_numel_;  // with the padding
    if (b >= 0 && p.offset != e)
      throw ArgumentError("ParameterStore::range_of: the parameters of '" + prefix + "' are not contiguous");
    if (b < 0) b = p.offset;
    e = end;
    ++count;
  }
  if (count == 0) throw ArgumentError("ParameterStore::range_of: no parameter starts with '" + prefix + "'");
  return {b, e};
}

size_t ParameterStore::index(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw ArgumentError("ParameterStore: no parameter named '" + name + "'");
  return it->second;
}

const ParamInfo& ParameterStore::info(const std::string& name) const { return infos_[index(name)]; }

Tensor ParameterStore::param(size_t i) const {
  if (!finalized()) throw ArgumentError("ParameterStore::param: not finalized");
  const ParamInfo& p = infos_.at(i);
  if (p.quantized)
    throw ArgumentError("ParameterStore: parameter '" + p.name + "' is stored quantized (" +
                        std::string(quant_scheme_name(quant_scheme_)) + "): it has no " +
                        std::string(dtype_name(params_.dtype())) + " view");
  return params_.slice(0, p.offset, p.offset + p.numel).reshape(p.shape);
}

Tensor ParameterStore::grad(size_t i) const {
  if (!finalized()) throw ArgumentError("ParameterStore::grad: not finalized");
  const ParamInfo& p = infos_.at(i);
  if (p.quantized)
    throw ArgumentError("ParameterStore: parameter '" + p.name + "' is stored quantized: no gradient");
  if (!has_gradients())
    throw ArgumentError("ParameterStore: parameter '" + p.name +
                        "' has no gradient (an inference model's store)");
  return grads_.slice(0, p.offset, p.offset + p.numel).reshape(p.shape);
}

void ParameterStore::zero_grads() {
  if (!grads_.defined() || grads_.is_meta()) return;
  const auto [b, e] = grad_part_;
  const size_t elem = dtype_size(grads_.dtype());
  std::memset(static_cast<char*>(grads_.raw_data()) + static_cast<size_t>(b) * elem, 0,
              static_cast<size_t>(e - b) * elem);
}

}  // namespace mixtrain
