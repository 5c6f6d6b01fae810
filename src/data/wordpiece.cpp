// WordPieceTokenizer: BERT's basic tokenizer (cleaning, CJK spacing, NFD accent stripping, lower
// casing, whitespace and punctuation splitting) and greedy longest-match WordPiece, following
// Hugging Face tokenizers' BertNormalizer, BertPreTokenizer and WordPiece model (see wordpiece.h).
// The Unicode data is ICU's (Debian's libicu).
#include "mixtrain/data/wordpiece.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "mixtrain/core/error.h"

namespace mixtrain {

namespace {

// The general category as tokenizers sees it. Its control, punctuation and non-spacing-mark tests
// come from the Rust crate unicode_categories, whose tables are Unicode 8.0's: a character
// assigned later is unassigned (Cn) there, so it is neither dropped, nor split off, nor stripped
// as an accent. ICU knows when each character was assigned (u_charAge), so ICU's current data
// gives the same answers, except for the six characters whose category Unicode changed since 8.0
// in a way that matters here (listed with their 8.0 category). Every code point is checked
// against tokenizers (tests/data/wordpiece_fixture_test.cpp).
uint32_t category_mask(UChar32 c) {
  switch (c) {
    case 0x166D:
      return U_GC_PO_MASK;  // CANADIAN SYLLABICS CHI SIGN: So since Unicode 12
    case 0x1734:
      return U_GC_MN_MASK;  // HANUNOO SIGN PAMUDPOD: Mc since 14
    case 0x1885:            // MONGOLIAN LETTER ALI GALI BALUDA,
    case 0x1886:
      return U_GC_LO_MASK;  //   ... THREE BALUDA: Mn since 9
    case 0xA9BD:
      return U_GC_MC_MASK;  // JAVANESE CONSONANT SIGN KERET: Mn since 12
    case 0x111C9:
      return U_GC_PO_MASK;  // SHARADA SANDHI MARK: Mn since 11
    default:
      break;
  }
  UVersionInfo age;
  u_charAge(c, age);
  if (age[0] > 8 || (age[0] == 8 && age[1] > 0)) return U_GC_CN_MASK;
  return U_GET_GC_MASK(c);
}
// \t \n \r are Cc but count as whitespace (BertNormalizer's is_control / is_whitespace).
bool is_control(UChar32 c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return (category_mask(c) & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK | U_GC_CS_MASK)) != 0;
}
bool is_whitespace(UChar32 c) { return c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(c); }
// ASCII punctuation (so $ + < = > ^ ` | ~, which Unicode calls symbols, split too) or P*.
bool is_punctuation(UChar32 c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
    return true;
  return (category_mask(c) & U_GC_P_MASK) != 0;
}
// The CJK Unified Ideographs blocks BERT spaces out (BertNormalizer's is_chinese_char).
bool is_cjk(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_utf8(std::string& s, UChar32 c) {
  char buf[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, c);  // c is a valid scalar value: it came out of U8_NEXT or ICU
  s.append(buf, size_t(n));
}

const icu::Normalizer2& nfd() {
  static const icu::Normalizer2* n = [] {
    UErrorCode st = U_ZERO_ERROR;
    const icu::Normalizer2* p = icu::Normalizer2::getNFDInstance(st);
    if (U_FAILURE(st) || !p) throw Error(std::string("ICU: cannot load NFD data: ") + u_errorName(st));
    return p;
  }();
  return *n;
}

struct Word {
  std::string text;
  int32_t special = -1;  // the id of a literal special token, else -1
};

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_tokens(std::vector<std::string> tokens, const std::string& name,
                                                   Options options) {
  if (options.max_chars_per_word < 1)
    throw ArgumentError("WordPieceTokenizer: max_chars_per_word must be >= 1, got " +
                        std::to_string(options.max_chars_per_word));
  if (tokens.size() >= size_t(INT32_MAX))
    throw IoError("vocabulary '" + name + "': too many tokens (" + std::to_string(tokens.size()) + ")");
  WordPieceTokenizer t;
  t.options_ = options;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& tok = tokens[i];
    if (tok.empty()) throw IoError("vocabulary '" + name + "':" + std::to_string(i + 1) + ": empty token");
    int32_t off = 0;
    const int32_t n = int32_t(std::min<size_t>(tok.size(), INT32_MAX));
    while (off < n) {
      UChar32 c;
      U8_NEXT(tok.data(), off, n, c);
      if (c < 0)
        throw IoError("vocabulary '" + name + "':" + std::to_string(i + 1) + ": token is not valid UTF-8");
    }
    const auto [it, fresh] = t.ids_.emplace(tok, int32_t(i));
    if (!fresh)
      throw IoError("vocabulary '" + name + "':" + std::to_string(i + 1) + ": duplicate token '" + tok +
                    "' (first on line " + std::to_string(it->second + 1) + ")");
  }
  t.tokens_ = std::move(tokens);
  const auto need = [&](const char* tok) {
    const int32_t id = t.id(tok);
    if (id < 0) throw IoError("vocabulary '" + name + "': no " + tok + " token");
    return id;
  };
  t.pad_ = need("[PAD]");
  t.unk_ = need("[UNK]");
  t.cls_ = need("[CLS]");
  t.sep_ = need("[SEP]");
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (const int32_t id = t.id(s); id >= 0) t.specials_.emplace_back(s, id);
  return t;
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::string& path, Options options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError("vocabulary '" + path + "': cannot be read (" + std::strerror(errno) + ")");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(f, line)) {
    // Hugging Face keeps line.trim_end(): drop trailing ASCII/Unicode whitespace (ASCII suffices
    // for the vocabularies in use; a non-ASCII trailing space would stay and be checked as UTF-8).
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r' ||
                             line.back() == '\v' || line.back() == '\f'))
      line.pop_back();
    tokens.push_back(line);
  }
  if (f.bad()) throw IoError("vocabulary '" + path + "': read error");
  if (tokens.empty()) throw IoError("vocabulary '" + path + "': the file is empty");
  return from_tokens(std::move(tokens), path, options);
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  if (id < 0 || id >= int32_t(tokens_.size()))
    throw ArgumentError("WordPieceTokenizer::token: id " + std::to_string(id) + " is outside [0, " +
                        std::to_string(tokens_.size()) + ")");
  return tokens_[size_t(id)];
}

int32_t WordPieceTokenizer::id(std::string_view tok) const {
  const auto it = ids_.find(std::string(tok));
  return it == ids_.end() ? -1 : it->second;
}

namespace {

// Steps 1-4 of wordpiece.h on one stretch of text without special tokens; `base` is its byte
// offset in the caller's text (for the UTF-8 error).
void basic_split(std::string_view seg, size_t base, bool lower_case, std::vector<Word>& out) {
  if (seg.size() > size_t(INT32_MAX))
    throw ArgumentError("WordPieceTokenizer: text longer than 2^31 - 1 bytes");
  icu::UnicodeString cleaned;
  const int32_t n = int32_t(seg.size());
  for (int32_t i = 0; i < n;) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(seg.data(), i, n, c);
    if (c < 0)
      throw ArgumentError("WordPieceTokenizer: text is not valid UTF-8 at byte " +
                          std::to_string(base + size_t(at)));
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      cleaned.append(UChar32(' '));
    } else if (is_cjk(c)) {
      cleaned.append(UChar32(' ')).append(c).append(UChar32(' '));
    } else {
      cleaned.append(c);
    }
  }
  icu::UnicodeString text;
  if (lower_case) {
    UErrorCode st = U_ZERO_ERROR;
    const icu::UnicodeString d = nfd().normalize(cleaned, st);
    if (U_FAILURE(st)) throw Error(std::string("ICU: NFD failed: ") + u_errorName(st));
    for (int32_t i = 0; i < d.length();) {
      const UChar32 c = d.char32At(i);
      i += U16_LENGTH(c);
      if (category_mask(c) & U_GC_MN_MASK) continue;
      text.append(u_tolower(c));  // after NFD, simple and full lower casing agree
    }
  } else {
    text = std::move(cleaned);
  }
  std::string word;
  const auto flush = [&] {
    if (!word.empty()) out.push_back(Word{std::move(word), -1});
    word.clear();
  };
  for (int32_t i = 0; i < text.length();) {
    const UChar32 c = text.char32At(i);
    i += U16_LENGTH(c);
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      append_utf8(word, c);
      flush();
    } else {
      append_utf8(word, c);
    }
  }
  flush();
}

}  // namespace

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  for_each_word(text, [&](const std::string& w, int32_t) { words.push_back(w); });
  return words;
}

// Step 0: split out literal special tokens (leftmost, longest), run steps 1-4 on the rest.
template <class Fn>
void WordPieceTokenizer::for_each_word(std::string_view text, Fn&& fn) const {
  std::vector<Word> words;
  size_t seg_start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t best_len = 0;
    int32_t best_id = -1;
    if (text[i] == '[') {
      for (const auto& [s, id] : specials_)
        if (s.size() > best_len && text.substr(i, s.size()) == s) best_len = s.size(), best_id = id;
    }
    if (best_len == 0) {
      ++i;
      continue;
    }
    basic_split(text.substr(seg_start, i - seg_start), seg_start, options_.lower_case, words);
    words.push_back(Word{std::string(text.substr(i, best_len)), best_id});
    i += best_len;
    seg_start = i;
  }
  basic_split(text.substr(seg_start), seg_start, options_.lower_case, words);
  for (const Word& w : words) fn(w.text, w.special);
}

void WordPieceTokenizer::wordpiece(std::string_view w, std::vector<int32_t>& out) const {
  int64_t chars = 0;
  for (const char b : w) chars += (uint8_t(b) & 0xC0) != 0x80;
  if (chars > options_.max_chars_per_word) {
    out.push_back(unk_);
    return;
  }
  const size_t first = out.size();
  std::string piece;
  for (size_t start = 0; start < w.size();) {
    size_t end = w.size();
    int32_t found = -1;
    while (start < end) {
      piece.assign(start > 0 ? "##" : "");
      piece.append(w.substr(start, end - start));
      if (const auto it = ids_.find(piece); it != ids_.end()) {
        found = it->second;
        break;
      }
      --end;  // back one code point
      while (end > start && (uint8_t(w[end]) & 0xC0) == 0x80) --end;
    }
    if (found < 0) {  // no piece fits here: the whole word is unknown
      out.resize(first);
      out.push_back(unk_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int32_t> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  for_each_word(text, [&](const std::string& w, int32_t special) {
    if (special >= 0) {
      ids.push_back(special);
    } else {
      wordpiece(w, ids);
    }
  });
  return ids;
}

Encoding WordPieceTokenizer::encode(std::string_view a, int64_t max_len) const {
  if (max_len != 0 && max_len < 2)
    throw ArgumentError("WordPieceTokenizer::encode: max_len must be 0 (no limit) or >= 2, got " +
                        std::to_string(max_len));
  std::vector<int32_t> ta = tokenize(a);
  if (max_len != 0 && int64_t(ta.size()) > max_len - 2) ta.resize(size_t(max_len - 2));
  Encoding e;
  e.ids.reserve(ta.size() + 2);
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), ta.begin(), ta.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  return e;
}

Encoding WordPieceTokenizer::encode_pair(std::string_view a, std::string_view b, int64_t max_len) const {
  if (max_len != 0 && max_len < 3)
    throw ArgumentError("WordPieceTokenizer::encode_pair: max_len must be 0 (no limit) or >= 3, got " +
                        std::to_string(max_len));
  std::vector<int32_t> ta = tokenize(a), tb = tokenize(b);
  if (max_len != 0 && int64_t(ta.size() + tb.size()) > max_len - 3) {
    // tokenizers' LongestFirst for pairs: with n1 the shorter length, n2 the longer and L the
    // room, the shorter keeps n1 and the longer L - n1 when that is enough; else both are cut,
    // the shorter to L / 2 and the longer to L / 2 + L % 2.
    const size_t L = size_t(max_len - 3);
    size_t n1 = ta.size(), n2 = tb.size();
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > L ? n1 : std::max(n1, L - n1);
    if (n1 + n2 > L) {
      n1 = L / 2;
      n2 = n1 + L % 2;
    }
    if (swap) std::swap(n1, n2);
    ta.resize(std::min(ta.size(), n1));
    tb.resize(std::min(tb.size(), n2));
  }
  Encoding e;
  e.ids.reserve(ta.size() + tb.size() + 3);
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), ta.begin(), ta.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  e.ids.insert(e.ids.end(), tb.begin(), tb.end());
  e.ids.push_back(sep_);
  e.type_ids.resize(e.ids.size(), 1);
  return e;
}

EncodedBatch WordPieceTokenizer::pad(const std::vector<Encoding>& encodings) const {
  if (encodings.empty()) throw ArgumentError("WordPieceTokenizer::pad: no encodings");
  EncodedBatch b;
  b.B = int64_t(encodings.size());
  for (size_t r = 0; r < encodings.size(); ++r) {
    const Encoding& e = encodings[r];
    if (e.type_ids.size() != e.ids.size())
      throw ArgumentError("WordPieceTokenizer::pad: encoding " + std::to_string(r) + " has " +
                          std::to_string(e.ids.size()) + " ids but " + std::to_string(e.type_ids.size()) +
                          " type ids");
    b.T = std::max(b.T, int64_t(e.ids.size()));
  }
  const size_t n = size_t(b.B * b.T);
  b.input_ids.assign(n, pad_);
  b.token_type_ids.assign(n, 0);
  b.attention_mask.assign(n, 0);
  for (size_t r = 0; r < encodings.size(); ++r) {
    const Encoding& e = encodings[r];
    const size_t row = r * size_t(b.T);
    std::copy(e.ids.begin(), e.ids.end(), b.input_ids.begin() + ptrdiff_t(row));
    std::copy(e.type_ids.begin(), e.type_ids.end(), b.token_type_ids.begin() + ptrdiff_t(row));
    std::fill_n(b.attention_mask.begin() + ptrdiff_t(row), e.ids.size(), 1);
  }
  return b;
}

}  // namespace mixtrain
