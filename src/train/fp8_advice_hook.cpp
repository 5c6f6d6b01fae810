// The fp8 advice's side measurements (src/train/fp8_advice_hook.h).
#include "train/fp8_advice_hook.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "autograd/probe_hook.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

constexpr std::array<Fp8Recipe, kFp8Recipes> kRecipes{Fp8Recipe::delayed, Fp8Recipe::current,
                                                      Fp8Recipe::rowwise, Fp8Recipe::mxfp8, Fp8Recipe::block};

DType slot_format(Fp8Slot s) { return s == Fp8Slot::grad_e5m2 ? DType::f8_e5m2 : DType::f8_e4m3; }

// A linear layer's operand as the GEMMs see it: (rows, last dim).
Tensor as_matrix(const Tensor& t) {
  const Tensor c = t.contiguous();
  const int64_t last = c.size(c.dim() - 1);
  return c.dim() == 2 ? c : c.reshape({c.numel() / last, last});
}

}  // namespace

class Fp8AdviceProbe final : public autograd::ProbeHook {
 public:
  explicit Fp8AdviceProbe(const Fp8Config& cfg) : cfg_(cfg) {}

  void set_sites(const std::vector<std::vector<std::string>>& blocks) {
    sites_.clear();
    index_.clear();
    for (size_t b = 0; b < blocks.size(); ++b)
      for (const std::string& path : blocks[b]) {
        index_[path] = sites_.size();
        Fp8SiteAdvice a;
        a.site = path;
        a.first_last = b == 0 || b + 1 == blocks.size();
        sites_.push_back(std::move(a));
      }
    delayed_.assign(sites_.size(), {});
  }
  void begin_step(autograd::ProbeHook* inner) { inner_ = inner; }

  void forward_output(const char* op, const std::string* module, const autograd::Node* node,
                      const Tensor& out) override {
    if (inner_) inner_->forward_output(op, module, node, out);
    if (op == nullptr || module == nullptr || node == nullptr || out.is_meta() ||
        std::string_view(op) != "linear")
      return;
    const auto it = index_.find(*module);
    if (it == index_.end()) return;
    measure(it->second, Fp8Slot::input, input_value(*node, 0), false);
    measure(it->second, Fp8Slot::weight, input_value(*node, 1), true);
  }
  void backward_input(const autograd::Node& node, const Tensor& grad_out) override {
    if (inner_) inner_->backward_input(node, grad_out);
    if (node.op != autograd::OpKind::linear || node.module == nullptr || grad_out.is_meta()) return;
    const auto it = index_.find(*node.module);
    if (it == index_.end()) return;
    measure(it->second, Fp8Slot::grad_e4m3, grad_out, false);
    measure(it->second, Fp8Slot::grad_e5m2, grad_out, false);
  }
  void backward_done(const autograd::Node& node) override {
    if (inner_) inner_->backward_done(node);
  }

  // After the step's backward: each slot's step amax enters its history, and the delayed recipe's
  // scale follows it as amp/fp8.h's Fp8State::update() moves a run's.
  void end_step() {
    for (Delayed& d : delayed_)
      for (int s = 0; s < kFp8Slots; ++s) {
        d.history[size_t(s)].push_back(d.step_amax[size_t(s)]);
        d.step_amax[size_t(s)] = 0.f;
        const std::vector<float>& h = d.history[size_t(s)];
        float a = h.back();
        if (cfg_.amax_compute == Fp8AmaxCompute::max)
          for (size_t k = h.size() - std::min<size_t>(h.size(), size_t(cfg_.amax_history)); k < h.size(); ++k)
            a = std::max(a, h[k]);
        if (a > 0.f && std::isfinite(a)) {
          const float sc = fp8_max(slot_format(Fp8Slot(s))) / a / std::ldexp(1.f, cfg_.margin);
          if (std::isfinite(sc)) d.scale[size_t(s)] = sc;
        }
      }
    ++steps_;
  }
  const std::vector<Fp8SiteAdvice>& sites() const { return sites_; }

 private:
  struct Delayed {
    std::array<float, kFp8Slots> scale{1.f, 1.f, 1.f, 1.f}, step_amax{};
    std::array<std::vector<float>, kFp8Slots> history;
  };

  static Tensor input_value(const autograd::Node& n, size_t i) {
    if (i < n.in_values.size() && (n.in_values[i].defined() || n.recompute_x))
      return autograd::saved_input(n, i);
    if (i < n.inputs.size() && n.inputs[i] && n.inputs[i]->value.defined()) return n.inputs[i]->value;
    throw Error("fp8 advice: a linear node without its input " + std::to_string(i));
  }

  // t quantized by every recipe in each orientation its GEMMs use it in (per-tensor scales: one).
  void measure(size_t site, Fp8Slot slot, const Tensor& t_in, bool weight) {
    const Tensor t = as_matrix(t_in);
    const DType fmt = slot_format(slot);
    Delayed& d = delayed_[site];
    for (Fp8Recipe r : kRecipes)
      for (bool along_cols : {true, false}) {
        if ((r == Fp8Recipe::delayed || r == Fp8Recipe::current) && !along_cols) continue;
        const Fp8Quant how = fp8_operand_quant(r, fmt, weight, along_cols);
        const Shape grid = fp8_blocks(how, t.size(0), t.size(1)).grid();
        Tensor q = Tensor::empty(t.shape(), DType::f32, MemCategory::workspace);
        Tensor scale_inv = Tensor::empty(grid, DType::f32, MemCategory::workspace);
        Tensor amax = Tensor::empty(grid, DType::f32, MemCategory::workspace);
        Tensor given;
        if (r == Fp8Recipe::delayed) {
          given = Tensor::empty({1, 1}, DType::f32, MemCategory::workspace);
          given.fill(d.scale[size_t(slot)]);
        }
        fp8_quantize(t, how, given.defined() ? &given : nullptr, q, scale_inv, amax);
        if (r == Fp8Recipe::delayed) {
          d.step_amax[size_t(slot)] = std::max(d.step_amax[size_t(slot)], amax.data<float>()[0]);
          if (steps_ == 0) continue;  // the first step casts at scale 1: judged from the second
        }
        fp8_quant_error(t, how, q, scale_inv, sites_[site].stats[size_t(r)][size_t(slot)]);
      }
  }

  Fp8Config cfg_;
  autograd::ProbeHook* inner_ = nullptr;
  std::vector<Fp8SiteAdvice> sites_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<Delayed> delayed_;
  int64_t steps_ = 0;
};

Fp8AdviceHook::Fp8AdviceHook(const Fp8Config& cfg, std::shared_ptr<std::vector<Fp8SiteAdvice>> out)
    : probe_(std::make_unique<Fp8AdviceProbe>(cfg)), out_(std::move(out)) {}

Fp8AdviceHook::~Fp8AdviceHook() {
  if (autograd::probe_hook() == probe_.get()) autograd::set_probe_hook(nullptr);
}

void Fp8AdviceHook::on_run_start(TrainingRun& run) { probe_->set_sites(run.model().fp8_linears()); }

void Fp8AdviceHook::on_step_begin(TrainingRun&, int64_t) {
  // The numerics hook's probe, installed just before (this one, left from a step that skipped
  // after_backward, is not teed into itself).
  autograd::ProbeHook* inner = autograd::probe_hook();
  probe_->begin_step(inner == probe_.get() ? nullptr : inner);
  autograd::set_probe_hook(probe_.get());
}

void Fp8AdviceHook::after_backward(TrainingRun&, int64_t) {
  autograd::set_probe_hook(nullptr);
  probe_->end_step();
  *out_ = probe_->sites();
}

void Fp8AdviceHook::after_update(TrainingRun&, const StepRecord&) {
  // A non-finite loss skips after_backward: the probe goes here too.
  if (autograd::probe_hook() == probe_.get()) autograd::set_probe_hook(nullptr);
}

}  // namespace mixtrain
