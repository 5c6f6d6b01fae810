// fp8-mixed: bf16-mixed with the linear layers' GEMMs in fp8 (autograd/fp8_linear.h), as
// Transformer Engine's fp8_autocast runs te.Linear: the recipe (kernels/fp8.h: delayed, current,
// rowwise, mxfp8, block), the format (hybrid: E4M3 forward, E5M2 gradients; or E4M3 throughout),
// which layers (the transformer blocks' linear layers; by default not the first and last block,
// nor the embeddings, the output head or a classifier, which stay bf16), and the delayed recipe's
// amax histories.
//
// Defaults, as the libraries users come from: the recipe delayed (TE's default recipe,
// DelayedScaling(margin=0, fp8_format=HYBRID, amax_history_len=1024, amax_compute_algo="max"));
// the format hybrid for delayed and current (TE's default for both), E4M3 for rowwise (torchao's
// rowwise recipe), mxfp8 and block (TE's MXFP8BlockScaling and Float8BlockScaling defaults).
// The first and last transformer block stay in bf16 by default, as the fp8 training reports
// recommend: Micikevicius et al., "FP8 Formats for Deep Learning" (arXiv 2209.05433, section 4:
// the first and last layers kept in higher precision) and NVIDIA's NeMo/Megatron option
// `first_last_layers_bf16`; `keep_first_last = false` puts them in fp8 too.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixtrain/autograd/fp8_linear.h"
#include "mixtrain/kernels/fp8.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

enum class Fp8Format : uint8_t { hybrid, e4m3 };
enum class Fp8AmaxCompute : uint8_t { max, most_recent };

const char* fp8_format_name(Fp8Format f);             // "hybrid"
Fp8Format parse_fp8_format(const std::string& s);     // ArgumentError naming the valid ones
const char* fp8_amax_compute_name(Fp8AmaxCompute a);  // "max"
Fp8AmaxCompute parse_fp8_amax_compute(const std::string& s);
Fp8Format fp8_default_format(Fp8Recipe r);

struct Fp8Config {
  Fp8Recipe recipe = Fp8Recipe::delayed;
  std::optional<Fp8Format> format;  // unset: fp8_default_format(recipe)
  int64_t amax_history = 1024;      // delayed: the history's length
  Fp8AmaxCompute amax_compute = Fp8AmaxCompute::max;
  int margin = 0;                 // delayed: scale = fp8_max / amax / 2^margin
  std::vector<std::string> keep;  // module paths (globs, as keep_fp32's) whose linear layers stay bf16
  bool keep_first_last = true;    // the first and last transformer block stay bf16
  Fp8Format format_or_default() const { return format ? *format : fp8_default_format(recipe); }
  void validate() const;  // ArgumentError naming the field
};

// A run's fp8 layers: one site per linear layer that runs in fp8, and the delayed recipe's amax
// histories (a ring of amax_history entries per site and role, zero until filled).
class Fp8State {
 public:
  // block_linears: the model's transformer blocks in order, each its linear layers' module paths
  // (Model::fp8_linears()); keep_fp32: the run's keep_fp32 patterns (those layers stay fp32).
  Fp8State(const Fp8Config& cfg, const std::vector<std::vector<std::string>>& block_linears,
           const std::vector<std::string>& keep_fp32);
  const Fp8Config& config() const { return cfg_; }
  // The site of the linear layer at `path`, or null when it stays bf16.
  std::shared_ptr<autograd::Fp8Site> site(const std::string& path) const;
  const std::vector<std::shared_ptr<autograd::Fp8Site>>& sites() const { return sites_; }
  const std::vector<std::string>& kept() const { return kept_; }  // the candidates left in bf16
  // After each optimizer step (Transformer Engine's amax-and-scale update): each site's step amax
  // per role becomes the history's newest entry; the delayed recipe's scale becomes
  // fp8_max / a / 2^margin for a = the history's max (or its newest entry), kept as it was when a
  // is zero or not finite; the step amaxes restart from 0.
  void update();
  // The histories, site by site, role by role, oldest first (checkpoints and tests).
  std::vector<float> history(size_t site, autograd::Fp8Role role) const;
  int64_t updates() const { return updates_; }
  // What a checkpoint keeps (the histories as a ring, sites x roles x amax_history, the scales,
  // sites x roles, the updates so far) and restores; restore() refuses another layout (ArgumentError).
  struct Snapshot {
    int64_t updates = 0;
    std::vector<float> history, scale;
  };
  Snapshot snapshot() const;
  void restore(const Snapshot& s);

 private:
  Fp8Config cfg_;
  std::vector<std::shared_ptr<autograd::Fp8Site>> sites_;
  std::unordered_map<std::string, size_t> by_path_;
  std::vector<std::string> kept_;
  Tensor hist_;          // sites x roles x amax_history f32, a ring (MemCategory::fp8)
  int64_t updates_ = 0;  // entries written: the ring's next slot is updates_ % amax_history
};

// Installs a run's fp8 state process-wide for the scope's lifetime (the layers look their site up
// by path; null: none installed). Set before the run's ops, not while they run.
class Fp8Scope {
 public:
  explicit Fp8Scope(const Fp8State* state);
  ~Fp8Scope();
  Fp8Scope(const Fp8Scope&) = delete;
  Fp8Scope& operator=(const Fp8Scope&) = delete;

 private:
  const Fp8State* saved_;
};
// The installed state's site for a linear layer, or null (no fp8 run, or the layer stays bf16).
std::shared_ptr<autograd::Fp8Site> fp8_site_for(const std::string& path);

}  // namespace mixtrain
