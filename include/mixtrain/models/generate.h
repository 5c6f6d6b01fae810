// Text generation from a GPT, the next token drawn from softmax(logits / temperature) (argmax at
// temperature 0), top-k optional. Deterministic: draw i uses counter_rng(seed, i), whatever the
// thread count.
//
// With the KV cache (default) the prompt runs once and each new token is one position through the
// model (Gpt::decode); when the context reaches block_size, the cache is rebuilt from the last
// block_size / 2 tokens (GPT-2's positions are absolute, so a window cannot slide in the cache).
// Without it, every token re-runs the last block_size tokens (a sliding window): the same tokens
// while the context fits in block_size, up to float rounding, and the reference for the cache.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "mixtrain/models/gpt.h"

namespace mixtrain {

struct GenerateOptions {
  int64_t tokens = 100;      // new tokens to generate
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  uint64_t seed = 0;
  bool kv_cache = true;                   // false: recompute the window for every token
  std::function<void(int32_t)> on_token;  // called with each new token as soon as it is drawn
};

// prompt: token ids in [0, vocab_size), at least one. Returns the new tokens only.
// ArgumentError for an empty prompt, ids out of range, negative tokens / temperature / top_k.
std::vector<int32_t> generate(Gpt& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt);

}  // namespace mixtrain
