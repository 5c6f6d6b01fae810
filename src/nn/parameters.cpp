// ParameterStore: one flat buffer for parameters and one for gradients, with named views.
#include "mixtrain/nn/parameters.h"

#include <cstring>

#include "tensor/alloc_site.h"

namespace mixtrain {

namespace {
constexpr int64_t kParamAlign = 16;  // elements
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

void ParameterStore::finalize(DType dtype, DType grad_dtype, MemCategory category) {
  if (finalized()) throw ArgumentError("ParameterStore::finalize: called twice");
  const ScopedOp site("flat arena");  // names the two arenas in memory reports
  params_ = Tensor::zeros({flat_numel_}, dtype, category);
  grads_ = Tensor::zeros({flat_numel_}, grad_dtype, MemCategory::gradients);
}

int64_t ParameterStore::numel() const {
  int64_t n = 0;
  for (const auto& p : infos_) n += p.numel;
  return n;
}

int64_t ParameterStore::flat_numel() const { return flat_numel_; }

size_t ParameterStore::index(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw ArgumentError("ParameterStore: no parameter named '" + name + "'");
  return it->second;
}

const ParamInfo& ParameterStore::info(const std::string& name) const { return infos_[index(name)]; }

Tensor ParameterStore::param(size_t i) const {
  if (!finalized()) throw ArgumentError("ParameterStore::param: not finalized");
  const ParamInfo& p = infos_.at(i);
  return params_.slice(0, p.offset, p.offset + p.numel).reshape(p.shape);
}

Tensor ParameterStore::grad(size_t i) const {
  if (!finalized()) throw ArgumentError("ParameterStore::grad: not finalized");
  const ParamInfo& p = infos_.at(i);
  return grads_.slice(0, p.offset, p.offset + p.numel).reshape(p.shape);
}

void ParameterStore::zero_grads() {
  if (grads_.defined() && !grads_.is_meta()) std::memset(grads_.raw_data(), 0, grads_.nbytes());
}

}  // namespace mixtrain
