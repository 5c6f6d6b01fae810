// The numerics probes' per-step table of sites (internal to train/numerics_hook.cpp): one entry
// per (module path, op, kind) seen in a sampled step, in order of first appearance, with the
// statistics of every tensor seen there merged (a module run twice in a step, micro-batches).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "autograd/probe_hook.h"
#include "kernels/numeric_stats.h"
#include "mixtrain/autograd/fp8_linear.h"

namespace mixtrain {

// forward: an op's output; grad: d(loss)/d(an op's output), what its backward rule receives;
// weight, weight_grad (as stored: times the loss scale), update (weight after - before the
// optimizer step): per parameter.
enum class ProbeKind : uint8_t { forward, grad, weight, weight_grad, update };
const char* probe_kind_name(ProbeKind k);

struct SiteStats {
  std::string site;  // module path ("transformer.h.3.mlp.c_fc") or parameter name; "model" outside modules
  std::string op;    // "linear", "gelu", ... ("param" for the per-parameter kinds)
  ProbeKind kind = ProbeKind::forward;
  DType dtype = DType::f32;  // of the first tensor seen
  int64_t calls = 0;
  NumericStats stats;
  // update only: updates below half an ulp of their weight in the storage dtype, bf16, fp16.
  bool has_ulp = false;
  DType storage = DType::f32;
  int64_t below_half_ulp[3] = {0, 0, 0};
  // grad and weight_grad only, when the hook is asked for it (the advice): exponents of the values.
  bool has_hist = false;
  Log2Histogram hist{};
  // Adds another sample of the same site (another step).
  void merge(const SiteStats& o);
};

// One site's JSON line (README "Numerics diagnostics"); every record of a step carries the step's
// loss (NaN: null), which `numerics --compare` (train/numerics_compare.h) reads.
std::string site_record_json(int64_t step, double loss, double loss_scale, const SiteStats& s);
// One fp8 site's role in a sampled step (kind "fp8"): its recipe, format, the step's amax, the
// delayed recipe's scale, and how well the casts kept the tensors (saturated and underflow
// shares, relative error: kernels/fp8.h, Fp8ErrorStats).
std::string fp8_record_json(int64_t step, double loss, const autograd::Fp8Site& site, int role);

class TensorBoardHook;
// Adds numerics_amax/<kind>/<site>:<op> (parameters: numerics_amax/<kind>/<name>) for each site.
void add_amax_scalars(TensorBoardHook& tb, const std::vector<SiteStats>& sites);
// Adds, for each fp8 site and role, fp8_amax/<role>/<site> (the step's amax), fp8_scale/<role>/<site>
// (the delayed recipe's scale of the step's casts), fp8_rel_error/, fp8_saturated/ and
// fp8_underflow/<role>/<site> (the sampled step's casts, kernels/fp8.h Fp8ErrorStats).
void add_fp8_scalars(TensorBoardHook& tb, const std::vector<std::shared_ptr<autograd::Fp8Site>>& sites);

class SiteTable {
 public:
  // Adds t's statistics to the site (module, op, kind); module may be null.
  SiteStats& add(const std::string* module, std::string_view op, ProbeKind kind, const Tensor& t);
  // The same with statistics already taken (of values of dtype `dtype`).
  SiteStats& add(const std::string* module, std::string_view op, ProbeKind kind, DType dtype,
                 const NumericStats& s);
  const std::vector<SiteStats>& sites() const { return sites_; }
  void clear();

 private:
  std::map<std::tuple<const void*, std::string, ProbeKind>, size_t> index_;
  std::vector<SiteStats> sites_;
};

// Fills a SiteTable from the autograd probe points: forward outputs and the gradients backward
// rules receive.
class SiteProbe final : public autograd::ProbeHook {
 public:
  // histograms: also the exponent histogram of each gradient (the advice's loss-scale range).
  SiteProbe(SiteTable& table, bool histograms) : table_(table), histograms_(histograms) {}
  void forward_output(const char* op, const std::string* module, const autograd::Node* node,
                      const Tensor& out) override;
  void backward_input(const autograd::Node& node, const Tensor& grad_out) override;
  void backward_done(const autograd::Node&) override {}

 private:
  SiteTable& table_;
  bool histograms_;
};

// Overflow forensics: the first op, in forward then backward order, whose output holds inf/NaN.
struct OverflowSite {
  bool found = false;
  std::string site, op;
  bool backward = false;  // the op's backward rule produced it (else its forward)
  float input_amax = 0;   // largest finite |x| over the op's inputs (backward: its incoming gradient)
  int64_t nonfinite = 0;  // inf/NaN elements in the output
};
class ForensicsProbe final : public autograd::ProbeHook {
 public:
  void forward_output(const char* op, const std::string* module, const autograd::Node* node,
                      const Tensor& out) override;
  void backward_input(const autograd::Node& node, const Tensor& grad_out) override;
  void backward_done(const autograd::Node& node) override;
  const OverflowSite& first() const { return first_; }

 private:
  OverflowSite first_;
  float grad_in_amax_ = 0;
};

}  // namespace mixtrain
