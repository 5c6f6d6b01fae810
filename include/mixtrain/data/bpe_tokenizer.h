// GPT-2's byte-level BPE tokenizer, id for id what Hugging Face `tokenizers` gives with
// ByteLevelBPETokenizer (default options) on the same vocab.json + merges.txt, checked on every
// line of the built-in corpus and on every Unicode code point (tests/data/bpe_fixture_test.cpp):
//   0. (tokenizer.json only) its added tokens written literally in the text are split out first
//      and map to their ids, longest first;
//   1. pre-tokenize with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (Oniguruma's classes: \p{L} letters, \p{N} numbers, \s = \t \n \v \f \r U+0085 and the
//      categories Zs Zl Zp), each match one pre-token;
//   2. map each pre-token's UTF-8 bytes to GPT-2's printable characters (bytes_to_unicode: the
//      188 printable Latin-1 bytes stand for themselves, the other 68 for U+0100 upwards in byte
//      order), one symbol a byte; a byte whose character is not in the vocabulary is dropped (no
//      unknown token, as Hugging Face without one);
//   3. merge: repeatedly join the adjacent pair of lowest merge rank (leftmost first among equal
//      ranks) until no adjacent pair is in merges.txt.
// Decoding maps the tokens' characters back to bytes (the inverse of step 2): decode(encode(t))
// == t for every valid UTF-8 text.
// Training (train_bpe) is Hugging Face's BpeTrainer as ByteLevelBPETokenizer.train calls it; see
// there. The Unicode data is ICU's (Debian's libicu).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mixtrain {

class BpeTokenizer {
 public:
  // Hugging Face's files: vocab.json (an object token -> id, ids 0..V-1 each once) and merges.txt
  // (an optional "#version" first line, then "A B" a line, A, B and AB in the vocabulary; rank =
  // line order). IoError naming the file (and line or key) for anything else.
  static BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // A tokenizer.json whose model is BPE (no dropout, no unknown token, no subword prefix or
  // suffix) with a ByteLevel pre-tokenizer (use_regex true) and no normalizer; its added tokens
  // are honoured (step 0). IoError for anything else, naming what.
  static BpeTokenizer from_tokenizer_json(const std::string& path);
  // DIR/tokenizer.json when it exists, else DIR/vocab.json + DIR/merges.txt.
  static BpeTokenizer from_dir(const std::string& dir);
  // From tokens (id = index) and merges (pairs of token strings, rank = index): what the loaders
  // and train_bpe build. `name` stands for the files in messages.
  static BpeTokenizer from_tokens(std::vector<std::string> tokens,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  const std::string& name);

  // The ids of a text (UTF-8; ArgumentError naming the byte offset otherwise).
  std::vector<int32_t> encode(std::string_view text) const;
  // The pre-tokens of step 1 (byte ranges of the text, in order, covering it exactly). Text that
  // is not UTF-8: ArgumentError "<what> is not valid UTF-8 at byte <base + offset>" (`text` being
  // a part of something larger, from byte `base` on).
  static std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view text, size_t base = 0,
                                                             std::string_view what = "BpeTokenizer: text");
  // The bytes of the ids' tokens (ArgumentError for an id out of range).
  std::string decode(const std::vector<int32_t>& ids) const;

  // Writes DIR/vocab.json and DIR/merges.txt as Hugging Face's BPE model save does (compact JSON
  // in id order; "#version: 0.2" then one merge a line), each to a temporary file renamed into
  // place. Creates DIR if needed. IoError on failure.
  void save(const std::string& dir) const;
  // What save() writes, as (file name, contents): vocab.json, then merges.txt (a checkpoint of a
  // run with this tokenizer carries them, so that transformers' AutoTokenizer loads it).
  std::vector<std::pair<std::string, std::string>> files() const;

  int64_t vocab_size() const { return int64_t(tokens_.size()); }
  int64_t num_merges() const { return int64_t(merges_.size()); }
  const std::string& token(int32_t id) const;  // ArgumentError out of range
  int32_t id(std::string_view token) const;    // -1 when not in the vocabulary
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  // A 64-bit FNV-1a hash of the vocabulary, the merges and the added tokens, as 16 hex digits:
  // what a token file records of the tokenizer that wrote it.
  std::string fingerprint() const;

  // GPT-2's byte -> character map (step 2) and its inverse (-1 for a code point no byte maps to).
  static uint32_t byte_char(uint8_t b);
  static int char_byte(uint32_t cp);

 private:
  BpeTokenizer() = default;
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  struct MergeRule {
    uint32_t rank;
    int32_t new_id;
  };
  std::vector<std::string> tokens_;  // by id, in byte-level characters (UTF-8)
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<std::string, std::string>> merges_;  // by rank
  std::unordered_map<uint64_t, MergeRule> merge_rules_;      // (left id << 32 | right id) -> rule
  int32_t byte_ids_[256] = {};                               // the id of each byte's character, or -1
  std::vector<std::pair<std::string, int32_t>> added_;       // literal added tokens, longest first
  // Pre-token -> ids, bounded (a plain cache: results are the same with or without it).
  mutable std::unique_ptr<std::mutex> cache_mutex_ = std::make_unique<std::mutex>();
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// Learning merges from a corpus: Hugging Face's BpeTrainer as ByteLevelBPETokenizer.train runs it
// (initial alphabet: the 256 byte characters, ids 0-255 in code point order; no special tokens;
// no alphabet limit), merge for merge:
//   - the corpus is read as lines, each with its line ending; each line is pre-tokenized (steps
//     1-2 above) and identical pre-tokens are counted (a word and its count);
//   - pair counts are summed over words (every adjacent occurrence, weighted by the word's count);
//   - repeatedly, the pair with the highest count (ties: the smallest (left id, right id)) becomes
//     a new token (left + right, the next id, or the existing id when that string is already a
//     token), merged left to right in every word it was counted in, and the counts of the pairs
//     around each merge are updated; a count taken from the queue is re-queued when stale;
//   - stop at vocab_size tokens or when the best count is below min_frequency.
// A pair learned twice (two merges making the same string) is kept once, at its later rank, as
// Hugging Face's merges map does. ArgumentError for vocab_size < 256 or min_frequency < 0, or text
// that is not UTF-8 (naming the byte offset).
struct BpeTrainOptions {
  int64_t vocab_size = 30000;  // ByteLevelBPETokenizer.train's defaults
  int64_t min_frequency = 2;
};
BpeTokenizer train_bpe(std::string_view corpus, const BpeTrainOptions& options, const std::string& name);

}  // namespace mixtrain
