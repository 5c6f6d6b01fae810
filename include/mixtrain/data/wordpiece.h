// BERT's WordPiece tokenizer from a vocab.txt, id for id what Hugging Face `tokenizers` does
// with BERT's tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece, the [CLS]/[SEP]
// template), checked on every Fine Foods review and fortunes entry
// (tests/data/wordpiece_fixture_test.cpp):
//   0. the special tokens ([PAD] [UNK] [CLS] [SEP] [MASK]) written literally in the text are
//      split out first and map to their ids (Hugging Face's added tokens, normalized: false);
//   1. clean: drop U+0000, U+FFFD and control/format/private-use characters (categories Cc, Cf,
//      Co; \t \n \r count as whitespace), map every White_Space character to a space;
//   2. put spaces around CJK ideographs;
//   3. (lower_case) strip accents: Unicode NFD, then drop non-spacing marks (Mn); lower case;
//   4. split on whitespace, then split off every punctuation character (categories P*, and ASCII
//      !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~);
//   5. WordPiece each word: more than max_chars_per_word (100) code points -> [UNK]; else greedy
//      longest match from the start, continuation pieces prefixed "##"; a word with a position
//      no piece matches is one [UNK].
// Unicode data (categories, NFD, case) comes from ICU. The categories of steps 1, 3 and 4 are
// taken as of Unicode 8.0, as tokenizers has them (its unicode_categories tables): a character
// assigned later counts as unassigned there. Text must be UTF-8 (ArgumentError otherwise, naming
// the byte offset).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mixtrain {

// One sequence or pair with its specials: [CLS] a [SEP] (b [SEP]).
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;  // 0 for [CLS] a [SEP], 1 for b [SEP]
};

// A padded batch, row-major (B, T), T = the longest encoding of the batch (dynamic padding).
struct EncodedBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> input_ids;       // (B, T), [PAD] past each row's end
  std::vector<int32_t> token_type_ids;  // (B, T), 0 past the end
  std::vector<int32_t> attention_mask;  // (B, T), 1 on real tokens, 0 on padding
};

class WordPieceTokenizer {
 public:
  struct Options {
    bool lower_case = true;  // also strips accents (tokenizer_config: strip_accents null)
    int64_t max_chars_per_word = 100;
  };

  // One token a line, id = line number - 1 (trailing whitespace of a line ignored, as Hugging
  // Face reads it). IoError for a missing/unreadable file, an empty or duplicate token (naming
  // the line), or a vocabulary without [UNK], [CLS], [SEP] or [PAD].
  static WordPieceTokenizer from_vocab_file(const std::string& path, Options options);
  static WordPieceTokenizer from_vocab_file(const std::string& path) {
    return from_vocab_file(path, Options{});
  }
  static WordPieceTokenizer from_tokens(std::vector<std::string> tokens, const std::string& name,
                                        Options options);

  // The words after steps 0-4 (a special token is one word).
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // The ids of the text without specials (steps 0-5).
  std::vector<int32_t> tokenize(std::string_view text) const;
  // [CLS] a [SEP], truncated to max_len tokens (0: no limit; else >= 2) by dropping a's tail.
  Encoding encode(std::string_view a, int64_t max_len = 0) const;
  // [CLS] a [SEP] b [SEP]; truncation (max_len >= 3, room L = max_len - 3) is Hugging Face's
  // longest_first: the shorter of a and b (a on a tie) stays whole and the longer is cut to the
  // rest when that leaves the longer at least as long; else the shorter is cut to L / 2 and the
  // longer to L / 2 + L % 2. Tokens are dropped from the end.
  Encoding encode_pair(std::string_view a, std::string_view b, int64_t max_len = 0) const;
  // Pads every encoding to the longest (ArgumentError for an empty list or an encoding whose
  // type_ids length differs from its ids').
  EncodedBatch pad(const std::vector<Encoding>& encodings) const;

  int64_t vocab_size() const { return int64_t(tokens_.size()); }
  const std::string& token(int32_t id) const;  // ArgumentError out of range
  int32_t id(std::string_view token) const;    // -1 when not in the vocabulary
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  int32_t cls_id() const { return cls_; }
  int32_t sep_id() const { return sep_; }
  const Options& options() const { return options_; }

 private:
  WordPieceTokenizer() = default;
  void wordpiece(std::string_view word, std::vector<int32_t>& out) const;
  template <class Fn>
  void for_each_word(std::string_view text, Fn&& fn) const;

  Options options_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // literal special tokens in the text
  int32_t pad_ = -1, unk_ = -1, cls_ = -1, sep_ = -1;
};

}  // namespace mixtrain
