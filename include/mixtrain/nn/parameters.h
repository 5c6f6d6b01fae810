// The parameter arena: every parameter of a model lives in one flat buffer, and its gradient in
// a second flat buffer with the same layout (after llm.c). Named views give each layer its
// tensors; the optimizer, the gradient norm, clipping and checkpoint I/O are flat loops over
// flat_params() / flat_grads(). Later: fp32 master weights as a third flat buffer, same layout.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct ParamInfo {
  std::string name;  // GPT-2 names: "transformer.h.0.attn.c_attn.weight"
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffers
  int64_t numel = 0;
  bool weight_decay = true;  // AdamW decays matrices, not biases / layer-norm gains (as nanoGPT)
};

class ParameterStore {
 public:
  // Declares a parameter; only before finalize(). Throws ArgumentError on a duplicate name.
  void declare(const std::string& name, const Shape& shape, bool weight_decay);
  // Allocates the flat parameter buffer (in `dtype`, charged to `category`: master_weights when
  // it is the fp32 master of a 16-bit working copy) and the gradient buffer (in grad_dtype,
  // zeroed). Offsets are aligned to 16 elements so every view starts on a 64-byte line for f32.
  void finalize(DType dtype, DType grad_dtype, MemCategory category = MemCategory::parameters);
  bool finalized() const { return params_.defined(); }

  const std::vector<ParamInfo>& infos() const { return infos_; }
  size_t size() const { return infos_.size(); }
  int64_t numel() const;                                 // sum of parameter sizes (no padding)
  int64_t flat_numel() const;                            // buffer length including alignment padding
  const ParamInfo& info(const std::string& name) const;  // throws ArgumentError naming the name

  Tensor param(size_t i) const;
  Tensor grad(size_t i) const;
  Tensor param(const std::string& name) const { return param(index(name)); }
  Tensor grad(const std::string& name) const { return grad(index(name)); }
  size_t index(const std::string& name) const;

  // The flat buffers, shape (flat_numel()); padding elements are zero and stay zero.
  const Tensor& flat_params() const { return params_; }
  const Tensor& flat_grads() const { return grads_; }
  void zero_grads();

 private:
  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, size_t> by_name_;
  int64_t flat_numel_ = 0;
  Tensor params_;  // (flat_numel) parameters
  Tensor grads_;   // (flat_numel) gradients
};

}  // namespace mixtrain
