// Text generation from a GPT: repeated forward passes over the last block_size tokens, the next
// token drawn from softmax(logits / temperature) (argmax at temperature 0), top-k optional.
// Deterministic: draw i uses counter_rng(seed, i), whatever the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "mixtrain/models/gpt.h"

namespace mixtrain {

struct GenerateOptions {
  int64_t tokens = 100;      // new tokens to generate
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  uint64_t seed = 0;
};

// prompt: token ids in [0, vocab_size), at least one. Returns the new tokens only.
// ArgumentError for an empty prompt, ids out of range, negative tokens / temperature / top_k.
std::vector<int32_t> generate(Gpt& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt);

}  // namespace mixtrain
