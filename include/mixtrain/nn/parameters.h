// The parameter arena: every parameter of a model lives in one flat buffer, and its gradient in
// a second flat buffer with the same layout (after llm.c). Named views give each layer its
// tensors; the optimizer, the gradient norm, clipping and checkpoint I/O are flat loops over
// flat_params() / flat_grads(). Later: fp32 master weights as a third flat buffer, same layout.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixtrain/tensor/quantized.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

struct ParamInfo {
  std::string name;  // GPT-2 names: "transformer.h.0.attn.c_attn.weight"
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffers (a quantized one: into the code arena)
  int64_t numel = 0;
  bool weight_decay = true;  // AdamW decays matrices, not biases / layer-norm gains (as nanoGPT)
  bool quantized = false;    // stored as codes and scales (QuantizedLayout), not in the flat buffers
  int64_t scale_offset = 0;  // quantized: its first row's scale in the scale arena
};

// Which 2-D parameters of a model are stored quantized, given to its constructor (models/gpt.h,
// models/encoder.h) before its store is finalized.
struct QuantizedLayout {
  QuantScheme scheme = QuantScheme::none;
  std::set<std::string> names;
  bool empty() const { return names.empty(); }
};

// What a model's constructor makes of its store beyond the dtypes: an inference model (classify,
// sample, quantized models) needs no gradient buffers; a quantized one stores the parameters its
// scheme quantizes (Model::quantizable_parameters) as codes and scales, and has no gradients.
struct StoreOptions {
  QuantScheme quant = QuantScheme::none;
  bool gradients = true;
};

// ZeRO stage 2 (optim/zero.h): while one is alive on this thread, a store finalized with gradients
// keeps only one part of its gradient buffer in memory: part(flat_numel) gives the elements
// [begin, end) this rank holds (its part of the summed gradients). The buffer keeps its layout
// (every parameter's gradient view, the flat loops' offsets), but the rest is reserved address
// space (Tensor::reserved), never written: backward hands each gradient to data parallelism
// (autograd::GradHandoffScope) instead of adding it there.
// ZeRO stage 3 (parameters too): the parameter buffer is kept the same way, the part resident and
// the rest reserved, made whole a unit at a time by the store's ParameterGather while it is used.
class GradientPartScope {
 public:
  using PartFn = std::function<std::pair<int64_t, int64_t>(int64_t flat_numel)>;
  explicit GradientPartScope(PartFn part, bool parameters_too = false);
  ~GradientPartScope();
  GradientPartScope(const GradientPartScope&) = delete;
  GradientPartScope& operator=(const GradientPartScope&) = delete;

 private:
  PartFn prev_;
  bool prev_parameters_;
};

// Flat element ranges [first, second) of a store's arena: a gather unit (a transformer block's
// parameters, or a model's others), one or more ranges.
using FlatRanges = std::vector<std::pair<int64_t, int64_t>>;

// ZeRO stage 3 (train/param_shards.h): while a store's parameters are sharded over the ranks, the
// model makes each unit's parameters whole before it reads them (gather, a collective every rank
// calls in the same order) and gives them back after (release). nn::GatherScope and
// nn::gathered (nn/layers.h) are how a model's forward calls it.
class ParameterGather {
 public:
  virtual ~ParameterGather() = default;
  virtual bool is_gathered(const FlatRanges& unit) const = 0;
  virtual void gather(const FlatRanges& unit) = 0;   // no-op when gathered
  virtual void release(const FlatRanges& unit) = 0;  // no-op when not gathered
};

class ParameterStore {
 public:
  // Declares a parameter; only before finalize(). Throws ArgumentError on a duplicate name.
  void declare(const std::string& name, const Shape& shape, bool weight_decay);
  // Allocates the flat parameter buffer (in `dtype`, charged to `category`: master_weights when
  // it is the fp32 master of a 16-bit working copy) and the gradient buffer (in grad_dtype,
  // zeroed). Offsets are aligned to 16 elements so every view starts on a 64-byte line for f32.
  // `quantized` names 2-D parameters to store as codes and scales instead (ArgumentError for an
  // unknown or non-2-D name): their slots in the flat buffers are empty, their codes live in one
  // flat code arena and their scales in one f32 arena, both MemCategory::quantized_weights.
  // gradients false: no gradient buffer (an inference model; grad() throws, bind_parameter makes
  // plain values).
  void finalize(DType dtype, DType grad_dtype, MemCategory category = MemCategory::parameters,
                const QuantizedLayout& quantized = {}, bool gradients = true);
  bool finalized() const { return params_.defined(); }
  bool has_gradients() const { return grads_.defined(); }
  // The quantized form of parameter i (ArgumentError if it is not quantized), and whether it is.
  bool is_quantized(size_t i) const { return infos_.at(i).quantized; }
  bool is_quantized(const std::string& name) const { return is_quantized(index(name)); }
  QuantizedTensor quantized(size_t i) const;
  QuantizedTensor quantized(const std::string& name) const { return quantized(index(name)); }
  QuantScheme quant_scheme() const { return quant_scheme_; }
  bool any_quantized() const { return quant_scheme_ != QuantScheme::none; }

  const std::vector<ParamInfo>& infos() const { return infos_; }
  size_t size() const { return infos_.size(); }
  int64_t numel() const;                                 // sum of parameter sizes (no padding)
  int64_t flat_numel() const;                            // buffer length including alignment padding
  const ParamInfo& info(const std::string& name) const;  // throws ArgumentError naming the name

  // Views of parameter i in the flat buffers (ArgumentError for a quantized one: quantized()).
  Tensor param(size_t i) const;
  Tensor grad(size_t i) const;
  Tensor param(const std::string& name) const { return param(index(name)); }
  Tensor grad(const std::string& name) const { return grad(index(name)); }
  size_t index(const std::string& name) const;

  // The flat buffers, shape (flat_numel()); padding elements are zero and stay zero.
  const Tensor& flat_params() const { return params_; }
  const Tensor& flat_grads() const { return grads_; }
  // Says that the parameters (and the quantized codes and scales) were written in place (loaded,
  // quantized): bumps their storages' versions, so that cached copies of them (autocast's casts,
  // the GEMM's packed weights) are made again.
  void mark_written() const;
  // The gradient elements [first, second) this store holds: the whole buffer, or under a
  // GradientPartScope at finalize its part. zero_grads() zeroes those.
  std::pair<int64_t, int64_t> gradient_part() const { return grad_part_; }
  void zero_grads();
  // The parameter elements [first, second) this store holds: the whole buffer, or under a
  // GradientPartScope with parameters_too its part (ZeRO-3; the rest is gathered per unit).
  std::pair<int64_t, int64_t> parameter_part() const { return param_part_; }
  bool parameters_sharded() const { return param_part_ != std::pair<int64_t, int64_t>{0, flat_numel_}; }
  // ZeRO-3: who gathers the parameters (null: they are whole, nothing to gather).
  void set_gather(ParameterGather* g) { gather_ = g; }
  ParameterGather* gather() const { return gather_; }
  // The flat range of the parameters whose names start with `prefix` (ArgumentError when none do,
  // or when they are not contiguous in the arena), alignment padding included.
  std::pair<int64_t, int64_t> range_of(const std::string& prefix) const;

 private:
  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, size_t> by_name_;
  int64_t flat_numel_ = 0;
  Tensor params_;  // (flat_numel) parameters
  Tensor grads_;   // (flat_numel) gradients
  std::pair<int64_t, int64_t> grad_part_{0, 0};
  std::pair<int64_t, int64_t> param_part_{0, 0};
  ParameterGather* gather_ = nullptr;
  QuantScheme quant_scheme_ = QuantScheme::none;
  Tensor codes_;   // the quantized parameters' codes, back to back (64-byte aligned)
  Tensor scales_;  // their per-row scales
};

}  // namespace mixtrain
