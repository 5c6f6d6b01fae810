// Sampling tokens from a GPT, with a KV cache or by re-running the window (models/generate.h).
#include "mixtrain/models/generate.h"

#include <algorithm>
#include <cmath>

#include "mixtrain/autograd/variable.h"
#include "mixtrain/core/error.h"
#include "mixtrain/numeric/stochastic.h"

namespace mixtrain {

std::vector<int32_t> generate(Gpt& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt) {
  const GptConfig& cfg = model.config();
  if (prompt.empty()) throw ArgumentError("generate: the prompt must hold at least one token");
  for (int32_t t : prompt)
    if (t < 0 || t >= cfg.vocab_size)
      throw ArgumentError("generate: token " + std::to_string(t) + " is outside the vocabulary of " +
                          std::to_string(cfg.vocab_size));
  // GenerateOptions' fields as spelled there; the CLI says its flags instead (Error::fields()).
  if (opt.tokens < 0) throw ArgumentError({"tokens"}, "tokens must be >= 0");
  if (!(opt.temperature >= 0.f) || !std::isfinite(opt.temperature))
    throw ArgumentError({"temperature"}, "temperature must be >= 0");
  if (opt.top_k < 0) throw ArgumentError({"top_k"}, "top_k must be >= 0");

  autograd::NoGradGuard no_grad;
  std::vector<int32_t> seq = prompt, out;
  const size_t V = static_cast<size_t>(cfg.vocab_size);
  std::vector<double> p(V);
  std::vector<size_t> order(V);
  // The token drawn from `last` (V logits) for draw i.
  auto draw = [&](const std::vector<float>& last, int64_t i) {
    size_t next = static_cast<size_t>(std::max_element(last.begin(), last.end()) - last.begin());
    if (opt.temperature > 0.f) {
      // softmax(logits / temperature) over the top_k largest (all when top_k is 0), in double.
      for (size_t v = 0; v < V; ++v) order[v] = v;
      size_t k = opt.top_k > 0 ? std::min(V, static_cast<size_t>(opt.top_k)) : V;
      if (k < V)
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                          [&](size_t a, size_t b) { return last[a] > last[b]; });
      const double mx = last[next];
      double sum = 0;
      for (size_t j = 0; j < k; ++j) sum += p[j] = std::exp((last[order[j]] - mx) / opt.temperature);
      const double u = (counter_rng(opt.seed, static_cast<uint64_t>(i)) + 0.5) / 4294967296.0 * sum;
      double acc = 0;
      next = order[k - 1];
      for (size_t j = 0; j < k; ++j) {
        acc += p[j];
        if (u < acc) {
          next = order[j];
          break;
        }
      }
    }
    return static_cast<int32_t>(next);
  };
  const size_t block = static_cast<size_t>(cfg.block_size);
  Gpt::KvCache cache;
  if (opt.kv_cache && opt.tokens > 0) cache = model.make_kv_cache();
  for (int64_t i = 0; i < opt.tokens; ++i) {
    std::vector<float> last;
    if (opt.kv_cache) {
      if (i == 0 || cache.length == cfg.block_size) {
        // (Re)fill: the prompt's last block_size tokens, or after a full cache the last half block.
        const size_t keep = i == 0 ? std::min(seq.size(), block) : std::max<size_t>(block / 2, 1);
        cache.length = 0;
        last = model.decode(std::vector<int32_t>(seq.end() - static_cast<std::ptrdiff_t>(keep), seq.end()),
                            cache);
      } else {
        last = model.decode({seq.back()}, cache);
      }
    } else {
      const size_t T = std::min(seq.size(), block);
      const std::vector<int32_t> window(seq.end() - static_cast<std::ptrdiff_t>(T), seq.end());
      const Tensor idx = Tensor::from_ints(window, {1, static_cast<int64_t>(T)});
      const Tensor logits = model.forward(idx, nullptr).logits.value();  // (1, T, V)
      last = logits.select(1, static_cast<int64_t>(T) - 1).contiguous().to_floats();
    }
    const int32_t next = draw(last, i);
    seq.push_back(next);
    out.push_back(next);
    if (opt.on_token) opt.on_token(next);
  }
  return out;
}

}  // namespace mixtrain
