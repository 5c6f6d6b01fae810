// The numerics probes' site table and the two probes (train/numerics_sites.h).
#include "train/numerics_sites.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mixtrain/train/tensorboard_hook.h"

namespace mixtrain {
namespace {
const std::string kModel = "model";  // ops outside any named module (the loss)
}

const char* probe_kind_name(ProbeKind k) {
  static const char* const names[] = {"forward", "grad", "weight", "weight_grad", "update"};
  return names[static_cast<size_t>(k)];
}

SiteStats& SiteTable::add(const std::string* module, std::string_view op, ProbeKind kind, const Tensor& t) {
  return add(module, op, kind, t.dtype(), numeric_stats(t));
}

SiteStats& SiteTable::add(const std::string* module, std::string_view op, ProbeKind kind, DType dtype,
                          const NumericStats& stats) {
  auto [it, fresh] = index_.try_emplace({module, std::string(op), kind}, sites_.size());
  if (fresh) {
    SiteStats s;
    s.site = module ? *module : kModel;
    s.op = std::string(op);
    s.kind = kind;
    s.dtype = dtype;
    sites_.push_back(std::move(s));
  }
  SiteStats& s = sites_[it->second];
  ++s.calls;
  s.stats.merge(stats);
  return s;
}

std::string site_record_json(int64_t step, double loss, double loss_scale, const SiteStats& s) {
  const double n = s.stats.numel > 0 ? static_cast<double>(s.stats.numel) : 1.0;
  nlohmann::ordered_json j;
  j["step"] = step;
  j["site"] = s.site;
  j["op"] = s.op;
  j["kind"] = probe_kind_name(s.kind);
  j["dtype"] = std::string(dtype_name(s.dtype));
  j["calls"] = s.calls;
  j["numel"] = s.stats.numel;
  j["amax"] = s.stats.amax;
  j["zero"] = static_cast<double>(s.stats.zeros) / n;
  j["nonfinite"] = static_cast<double>(s.stats.nonfinite) / n;
  for (size_t f = 0; f < kNumProbeFormats; ++f) {
    const FormatCounts& c = s.stats.formats[f];
    j[probe_format_name(static_cast<ProbeFormat>(f))] = {{"subnormal", static_cast<double>(c.subnormal) / n},
                                                         {"flushed", static_cast<double>(c.flushed) / n},
                                                         {"overflow", static_cast<double>(c.overflow) / n}};
  }
  if (s.has_ulp) {
    j["storage"] = std::string(dtype_name(s.storage));
    j["below_half_ulp"] = static_cast<double>(s.below_half_ulp[0]) / n;
    j["below_half_ulp_bf16"] = static_cast<double>(s.below_half_ulp[1]) / n;
    j["below_half_ulp_fp16"] = static_cast<double>(s.below_half_ulp[2]) / n;
  }
  j["loss_scale"] = loss_scale;
  j["loss"] = loss;  // NaN: null
  return j.dump();
}

std::string fp8_record_json(int64_t step, double loss, const autograd::Fp8Site& site, int role) {
  const Fp8ErrorStats& e = site.stats[size_t(role)];
  const double n = e.count > 0 ? static_cast<double>(e.count) : 1.0;
  const autograd::Fp8Role r = static_cast<autograd::Fp8Role>(role);
  nlohmann::ordered_json j;
  j["step"] = step;
  j["site"] = site.path;
  j["op"] = "fp8_linear";
  j["kind"] = "fp8";
  j["role"] = autograd::fp8_role_name(r);
  j["recipe"] = fp8_recipe_name(site.recipe);
  j["format"] = std::string(dtype_name(site.format(r)));
  j["numel"] = e.count;
  j["amax"] = site.step_amax[size_t(role)];
  if (site.recipe == Fp8Recipe::delayed) j["scale"] = site.scale[size_t(role)];
  j["saturated"] = static_cast<double>(e.saturated) / n;
  j["underflow"] = static_cast<double>(e.underflow) / n;
  j["rel_error"] = e.relative_error();
  j["loss"] = loss;
  return j.dump();
}

void SiteStats::merge(const SiteStats& o) {
  calls += o.calls;
  stats.merge(o.stats);
  has_ulp = has_ulp || o.has_ulp;
  storage = o.storage;
  for (int i = 0; i < 3; ++i) below_half_ulp[i] += o.below_half_ulp[i];
  has_hist = has_hist || o.has_hist;
  for (size_t b = 0; b < hist.size(); ++b) hist[b] += o.hist[b];
}

void add_amax_scalars(TensorBoardHook& tb, const std::vector<SiteStats>& sites) {
  for (const SiteStats& s : sites)
    tb.add_scalar("numerics_amax/" + std::string(probe_kind_name(s.kind)) + "/" + s.site +
                      (s.op == "param" ? "" : ":" + s.op),
                  s.stats.amax);
}

void add_fp8_scalars(TensorBoardHook& tb, const std::vector<std::shared_ptr<autograd::Fp8Site>>& sites) {
  for (const auto& s : sites)
    for (int role = 0; role < autograd::kFp8Roles; ++role) {
      const std::string tail =
          std::string("/") + autograd::fp8_role_name(static_cast<autograd::Fp8Role>(role)) + "/" + s->path;
      const Fp8ErrorStats& e = s->stats[size_t(role)];
      const double n = e.count > 0 ? static_cast<double>(e.count) : 1.0;
      tb.add_scalar("fp8_amax" + tail, s->step_amax[size_t(role)]);
      if (s->recipe == Fp8Recipe::delayed) tb.add_scalar("fp8_scale" + tail, s->scale[size_t(role)]);
      tb.add_scalar("fp8_rel_error" + tail, static_cast<float>(e.relative_error()));
      tb.add_scalar("fp8_saturated" + tail, static_cast<float>(static_cast<double>(e.saturated) / n));
      tb.add_scalar("fp8_underflow" + tail, static_cast<float>(static_cast<double>(e.underflow) / n));
    }
}

void SiteTable::clear() {
  index_.clear();
  sites_.clear();
}

void SiteProbe::forward_output(const char* op, const std::string* module, const autograd::Node*,
                               const Tensor& out) {
  if (op == nullptr || std::string_view(op) == "reshape") return;  // a view: its input's values again
  table_.add(module, op, ProbeKind::forward, out);
}

void SiteProbe::backward_input(const autograd::Node& node, const Tensor& grad_out) {
  if (node.op == autograd::OpKind::reshape) return;
  SiteStats& s = table_.add(node.module, autograd::op_kind_name(node.op), ProbeKind::grad, grad_out);
  if (!histograms_) return;
  const std::vector<float> v = grad_out.to_floats();
  add_log2_histogram(v.data(), static_cast<int64_t>(v.size()), s.hist);
  s.has_hist = true;
}

void ForensicsProbe::forward_output(const char* op, const std::string* module, const autograd::Node* node,
                                    const Tensor& out) {
  if (first_.found || out.is_meta()) return;
  const NumericStats s = numeric_stats(out);
  if (s.nonfinite == 0) return;
  first_.found = true;
  first_.site = module ? *module : kModel;
  first_.op = op ? op : "?";
  first_.nonfinite = s.nonfinite;
  if (node)
    for (const auto& in : node->inputs)
      if (in->value.defined()) first_.input_amax = std::max(first_.input_amax, numeric_stats(in->value).amax);
}

void ForensicsProbe::backward_input(const autograd::Node&, const Tensor& grad_out) {
  if (!first_.found) grad_in_amax_ = numeric_stats(grad_out).amax;
}

void ForensicsProbe::backward_done(const autograd::Node& node) {
  if (first_.found) return;
  for (const auto& in : node.inputs) {
    if (!in->requires_grad || !in->grad.defined()) continue;
    const NumericStats s = numeric_stats(in->grad);
    if (s.nonfinite == 0) continue;
    first_.found = true;
    first_.backward = true;
    first_.site = node.module ? *node.module : kModel;
    first_.op = std::string(autograd::op_kind_name(node.op));
    first_.input_amax = grad_in_amax_;
    first_.nonfinite = s.nonfinite;
    return;
  }
}

}  // namespace mixtrain
