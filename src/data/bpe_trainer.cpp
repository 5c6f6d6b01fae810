// train_bpe: Hugging Face's BpeTrainer (tokenizers/src/models/bpe/trainer.rs) as
// ByteLevelBPETokenizer.train runs it, step for step, so the merges come out the same; see
// bpe_tokenizer.h. Written here because the trainer is part of the product (a tokenizer learned
// by `mixtrain tokenizer train` without Python) and the only implementation with these exact
// semantics is Rust.
#include <unicode/utf8.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "mixtrain/core/error.h"
#include "mixtrain/data/bpe_tokenizer.h"

namespace mixtrain {

namespace {

using Pair = std::pair<int32_t, int32_t>;
uint64_t key_of(Pair p) { return (uint64_t(uint32_t(p.first)) << 32) | uint32_t(p.second); }
Pair pair_of(uint64_t k) { return {int32_t(k >> 32), int32_t(uint32_t(k))}; }

// A queue entry: the pair, its count when queued, and the words it was counted in then.
struct Entry {
  Pair pair;
  int64_t count;
  std::vector<int32_t> words;
};
// The heap's order (trainer.rs' Merge): the higher count first; on equal counts the smaller pair.
struct Lower {
  bool operator()(const Entry& x, const Entry& y) const {
    if (x.count != y.count) return x.count < y.count;
    return x.pair > y.pair;
  }
};

std::string utf8_of(uint32_t cp) {
  char buf[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, UChar32(cp));
  return std::string(buf, size_t(n));
}

// Word::merge: joins every (a, b) left to right into `c`, returning the pair count changes.
void merge_word(std::vector<int32_t>& w, int32_t a, int32_t b, int32_t c,
                std::vector<std::pair<Pair, int>>& changes) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] != a || i + 1 >= w.size() || w[i + 1] != b) continue;
    if (i > 0) {
      changes.push_back({{w[i - 1], a}, -1});
      changes.push_back({{w[i - 1], c}, 1});
    }
    w[i] = c;
    w.erase(w.begin() + std::ptrdiff_t(i) + 1);
    if (i + 1 < w.size()) {
      changes.push_back({{b, w[i + 1]}, -1});
      changes.push_back({{c, w[i + 1]}, 1});
    }
  }
}

}  // namespace

BpeTokenizer train_bpe(std::string_view corpus, const BpeTrainOptions& options, const std::string& name) {
  if (options.vocab_size < 256 || options.vocab_size >= int64_t(INT32_MAX))
    throw ArgumentError({"vocab_size"}, "train_bpe: vocab_size must be in [256, 2^31 - 1), got " +
                                            std::to_string(options.vocab_size));
  if (options.min_frequency < 0)
    throw ArgumentError({"min_frequency"}, "train_bpe: min_frequency must be >= 0, got " +
                                               std::to_string(options.min_frequency));

  // The alphabet: the 256 byte characters in code point order; byte_id[b] is byte b's id.
  std::vector<uint32_t> chars(256);
  for (int b = 0; b < 256; ++b) chars[size_t(b)] = BpeTokenizer::byte_char(uint8_t(b));
  std::sort(chars.begin(), chars.end());
  std::vector<std::string> tokens;
  int32_t byte_id[256];
  for (size_t k = 0; k < chars.size(); ++k) {
    tokens.push_back(utf8_of(chars[k]));
    byte_id[BpeTokenizer::char_byte(chars[k])] = int32_t(k);
  }
  std::unordered_map<std::string, int32_t> token_ids;
  for (size_t k = 0; k < tokens.size(); ++k) token_ids.emplace(tokens[k], int32_t(k));

  // Words: the corpus's lines (each with its ending), pre-tokenized, identical pre-tokens counted.
  std::unordered_map<std::string, int64_t> word_counts;
  for (size_t pos = 0; pos < corpus.size();) {
    size_t end = corpus.find('\n', pos);
    end = end == std::string_view::npos ? corpus.size() : end + 1;
    const std::string_view line = corpus.substr(pos, end - pos);
    const auto pieces = BpeTokenizer::pre_tokenize(line, pos, "train_bpe: '" + name + "'");
    for (const auto& [b, e] : pieces) ++word_counts[std::string(line.substr(b, e - b))];
    pos = end;
  }
  // In a fixed order (Hugging Face's is a hash map's: the result does not depend on it).
  std::vector<std::pair<std::string, int64_t>> sorted_words(word_counts.begin(), word_counts.end());
  std::sort(sorted_words.begin(), sorted_words.end());
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  words.reserve(sorted_words.size());
  for (const auto& [w, n] : sorted_words) {
    std::vector<int32_t> symbols;
    symbols.reserve(w.size());
    for (const char ch : w) symbols.push_back(byte_id[uint8_t(ch)]);
    words.push_back(std::move(symbols));
    counts.push_back(n);
  }

  // Pair counts and the words each pair occurs in.
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t i = 0; i < words.size(); ++i)
    for (size_t k = 0; k + 1 < words[i].size(); ++k) {
      const uint64_t key = key_of({words[i][k], words[i][k + 1]});
      pair_counts[key] += counts[i];
      std::vector<int32_t>& ws = where[key];
      if (ws.empty() || ws.back() != int32_t(i)) ws.push_back(int32_t(i));
    }
  std::priority_queue<Entry, std::vector<Entry>, Lower> queue;
  const auto enqueue_all = [&] {
    for (auto& [key, ws] : where) {
      const int64_t n = pair_counts[key];
      if (n <= 0) continue;
      std::sort(ws.begin(), ws.end());
      ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
      queue.push({pair_of(key), n, std::move(ws)});
    }
    where.clear();
  };
  enqueue_all();

  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::pair<Pair, int>> changes;
  while (int64_t(tokens.size()) < options.vocab_size && !queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    const int64_t current = pair_counts[key_of(top.pair)];
    if (top.count != current) {
      top.count = current;
      queue.push(std::move(top));
      continue;
    }
    if (top.count < 1 || options.min_frequency > top.count) break;
    const std::string made = tokens[size_t(top.pair.first)] + tokens[size_t(top.pair.second)];
    const auto [it, fresh] = token_ids.emplace(made, int32_t(tokens.size()));
    if (fresh) tokens.push_back(made);
    const int32_t new_id = it->second;
    merges.emplace_back(tokens[size_t(top.pair.first)], tokens[size_t(top.pair.second)]);
    for (const int32_t w : top.words) {
      changes.clear();
      merge_word(words[size_t(w)], top.pair.first, top.pair.second, new_id, changes);
      for (const auto& [p, delta] : changes) {
        const uint64_t key = key_of(p);
        pair_counts[key] += delta * counts[size_t(w)];
        if (delta > 0) where[key].push_back(w);
      }
    }
    enqueue_all();
  }
  return BpeTokenizer::from_tokens(std::move(tokens), merges, "tokenizer trained on '" + name + "'");
}

}  // namespace mixtrain
