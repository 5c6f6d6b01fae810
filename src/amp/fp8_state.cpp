// fp8-mixed's configuration and state (amp/fp8.h): which linear layers run in fp8, the delayed
// recipe's amax histories and their update after each optimizer step.
#include <algorithm>
#include <cmath>
#include <string>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::hybrid ? "hybrid" : "e4m3"; }

Fp8Format parse_fp8_format(const std::string& s) {
  if (s == "hybrid") return Fp8Format::hybrid;
  if (s == "e4m3") return Fp8Format::e4m3;
  throw ArgumentError("unknown fp8 format '" + s + "' (valid: hybrid, e4m3)");
}

const char* fp8_amax_compute_name(Fp8AmaxCompute a) {
  return a == Fp8AmaxCompute::max ? "max" : "most_recent";
}

Fp8AmaxCompute parse_fp8_amax_compute(const std::string& s) {
  if (s == "max") return Fp8AmaxCompute::max;
  if (s == "most_recent") return Fp8AmaxCompute::most_recent;
  throw ArgumentError("unknown fp8 amax reduction '" + s + "' (valid: max, most_recent)");
}

Fp8Format fp8_default_format(Fp8Recipe r) {
  return r == Fp8Recipe::delayed || r == Fp8Recipe::current ? Fp8Format::hybrid : Fp8Format::e4m3;
}

void Fp8Config::validate() const {
  if (amax_history < 1 || amax_history > (int64_t{1} << 20))
    throw ArgumentError({"fp8.amax_history"},
                        "fp8 amax history " + std::to_string(amax_history) + " must be in [1, 1048576]");
  if (margin < 0 || margin > 64)
    throw ArgumentError({"fp8.margin"}, "fp8 margin " + std::to_string(margin) + " must be in [0, 64]");
  for (const std::string& p : keep)
    if (p.empty()) throw ArgumentError({"fp8.keep"}, "fp8 keep has an empty pattern");
}

Fp8State::Fp8State(const Fp8Config& cfg, const std::vector<std::vector<std::string>>& block_linears,
                   const std::vector<std::string>& keep_fp32)
    : cfg_(cfg) {
  cfg_.validate();
  const Fp8Format f = cfg_.format_or_default();
  const size_t nb = block_linears.size();
  for (size_t b = 0; b < nb; ++b)
    for (const std::string& path : block_linears[b]) {
      const bool edge = cfg_.keep_first_last && (b == 0 || b + 1 == nb);
      if (edge || keep_fp32_matches(cfg_.keep, path) || keep_fp32_matches(keep_fp32, path)) {
        kept_.push_back(path);
        continue;
      }
      auto s = std::make_shared<autograd::Fp8Site>();
      s->path = path;
      s->recipe = cfg_.recipe;
      s->fwd_format = DType::f8_e4m3;
      s->bwd_format = f == Fp8Format::hybrid ? DType::f8_e5m2 : DType::f8_e4m3;
      by_path_[path] = sites_.size();
      sites_.push_back(std::move(s));
    }
  // The histories are run memory of their own (MemCategory::fp8): a Tensor, so that the tracker
  // and the meta device's prediction count them.
  hist_ = Tensor::zeros({static_cast<int64_t>(sites_.size()) * autograd::kFp8Roles * cfg_.amax_history},
                        DType::f32, MemCategory::fp8);
}

std::shared_ptr<autograd::Fp8Site> Fp8State::site(const std::string& path) const {
  const auto it = by_path_.find(path);
  return it == by_path_.end() ? nullptr : sites_[it->second];
}

void Fp8State::update() {
  const size_t H = size_t(cfg_.amax_history);
  const size_t slot = size_t(updates_ % cfg_.amax_history);
  if (hist_.is_meta()) {  // (a memory prediction: nothing to record)
    ++updates_;
    return;
  }
  for (size_t i = 0; i < sites_.size(); ++i) {
    autograd::Fp8Site& s = *sites_[i];
    for (int r = 0; r < autograd::kFp8Roles; ++r) {
      float* h = hist_.data<float>() + (i * autograd::kFp8Roles + size_t(r)) * H;
      h[slot] = s.step_amax[size_t(r)];
      s.step_amax[size_t(r)] = 0.f;
      if (cfg_.recipe != Fp8Recipe::delayed) continue;
      float a = h[slot];
      if (cfg_.amax_compute == Fp8AmaxCompute::max)
        for (size_t k = 0; k < std::min<size_t>(H, size_t(updates_) + 1); ++k) a = std::max(a, h[k]);
      if (a > 0.f && std::isfinite(a)) {
        const float sc = fp8_max(s.format(autograd::Fp8Role(r))) / a / std::ldexp(1.f, cfg_.margin);
        if (std::isfinite(sc)) s.scale[size_t(r)] = sc;
      }
    }
  }
  ++updates_;
}

std::vector<float> Fp8State::history(size_t site, autograd::Fp8Role role) const {
  const size_t H = size_t(cfg_.amax_history);
  std::vector<float> v;
  if (hist_.is_meta()) return v;
  const float* h = hist_.data<float>() + (site * autograd::kFp8Roles + size_t(role)) * H;
  const size_t n = std::min<size_t>(H, size_t(updates_));
  for (size_t k = 0; k < n; ++k) v.push_back(h[(size_t(updates_) - n + k) % H]);
  return v;
}

Fp8State::Snapshot Fp8State::snapshot() const {
  Snapshot s;
  s.updates = updates_;
  s.history = hist_.is_meta() ? std::vector<float>(size_t(hist_.numel()), 0.f) : hist_.to_floats();
  for (const auto& site : sites_) s.scale.insert(s.scale.end(), site->scale.begin(), site->scale.end());
  return s;
}

void Fp8State::restore(const Snapshot& s) {
  const size_t n = size_t(hist_.numel());
  if (s.history.size() != n || s.scale.size() != sites_.size() * autograd::kFp8Roles || s.updates < 0)
    throw ArgumentError("fp8 state: " + std::to_string(s.scale.size() / autograd::kFp8Roles) +
                        " sites with " + std::to_string(s.history.size()) +
                        " history entries, this run has " + std::to_string(sites_.size()) + " sites with " +
                        std::to_string(n));
  if (!hist_.is_meta()) std::copy(s.history.begin(), s.history.end(), hist_.data<float>());
  updates_ = s.updates;
  for (size_t i = 0; i < sites_.size(); ++i)
    for (int r = 0; r < autograd::kFp8Roles; ++r) {
      sites_[i]->scale[size_t(r)] = s.scale[i * autograd::kFp8Roles + size_t(r)];
      sites_[i]->step_amax[size_t(r)] = 0.f;
    }
}

namespace {
const Fp8State* g_fp8 = nullptr;
}  // namespace

Fp8Scope::Fp8Scope(const Fp8State* state) : saved_(g_fp8) { g_fp8 = state; }
Fp8Scope::~Fp8Scope() { g_fp8 = saved_; }

std::shared_ptr<autograd::Fp8Site> fp8_site_for(const std::string& path) {
  return g_fp8 ? g_fp8->site(path) : nullptr;
}

}  // namespace mixtrain
