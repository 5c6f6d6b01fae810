// Steps 1 and 2 of bpe_tokenizer.h: GPT-2's pre-tokenizer pattern, written out as the
// backtracking regex engine (Oniguruma, in Hugging Face's ByteLevel pre-tokenizer) matches it, and
// GPT-2's byte <-> character map. A regex library would do step 1 too, but std::regex has no
// Unicode classes and the pattern is small: the alternatives are tried in order at each position.
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <array>

#include "mixtrain/core/error.h"
#include "mixtrain/data/bpe_tokenizer.h"

namespace mixtrain {

namespace {

enum class CharClass : uint8_t { letter, number, space, other };

// Unicode 16.0's new letters and numbers. Debian 12's ICU (72) has Unicode 15.0's data, where
// these are unassigned (Cn); tokenizers' Oniguruma has 16.0's, where they are \p{L} / \p{N}. Only
// a code point ICU calls unassigned is looked up here (a newer ICU knows them itself). Every code
// point is checked against tokenizers (tests/data/bpe_fixture_test.cpp).
struct Range {
  UChar32 first, last;
  CharClass cls;
};
constexpr Range kUnicode16[] = {
    {0x1C89, 0x1C8A, CharClass::letter},   {0xA7CB, 0xA7CD, CharClass::letter},
    {0xA7DA, 0xA7DC, CharClass::letter},   {0x105C0, 0x105F3, CharClass::letter},
    {0x10D40, 0x10D49, CharClass::number}, {0x10D4A, 0x10D65, CharClass::letter},
    {0x10D6F, 0x10D85, CharClass::letter}, {0x10EC2, 0x10EC4, CharClass::letter},
    {0x11380, 0x11389, CharClass::letter}, {0x1138B, 0x1138B, CharClass::letter},
    {0x1138E, 0x1138E, CharClass::letter}, {0x11390, 0x113B5, CharClass::letter},
    {0x113B7, 0x113B7, CharClass::letter}, {0x113D1, 0x113D1, CharClass::letter},
    {0x113D3, 0x113D3, CharClass::letter}, {0x116D0, 0x116E3, CharClass::number},
    {0x11BC0, 0x11BE0, CharClass::letter}, {0x11BF0, 0x11BF9, CharClass::number},
    {0x13460, 0x143FA, CharClass::letter}, {0x16100, 0x1611D, CharClass::letter},
    {0x16130, 0x16139, CharClass::number}, {0x16D40, 0x16D6C, CharClass::letter},
    {0x16D70, 0x16D79, CharClass::number}, {0x18CFF, 0x18CFF, CharClass::letter},
    {0x1CCF0, 0x1CCF9, CharClass::number}, {0x1E5D0, 0x1E5ED, CharClass::letter},
    {0x1E5F0, 0x1E5F0, CharClass::letter}, {0x1E5F1, 0x1E5FA, CharClass::number},
    {0x2EBF0, 0x2EE5D, CharClass::letter},
};

CharClass unicode16_class(UChar32 c) {
  for (const Range& r : kUnicode16)
    if (c >= r.first && c <= r.last) return r.cls;
  return CharClass::other;
}

// Oniguruma's \p{L}, \p{N} and \s (Unicode: \t \n \v \f \r, U+0085, and Zs Zl Zp).
CharClass classify(UChar32 c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
    if (c >= '0' && c <= '9') return CharClass::number;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return CharClass::space;
    return CharClass::other;
  }
  if (c == 0x85) return CharClass::space;
  const uint32_t m = U_GET_GC_MASK(c);
  if (m & U_GC_L_MASK) return CharClass::letter;
  if (m & U_GC_N_MASK) return CharClass::number;
  if (m & (U_GC_ZS_MASK | U_GC_ZL_MASK | U_GC_ZP_MASK)) return CharClass::space;
  if (m & U_GC_CN_MASK) return unicode16_class(c);
  return CharClass::other;
}

struct CodePoint {
  UChar32 c;
  CharClass cls;
  size_t begin;  // byte offset of its first byte
};

// bytes_to_unicode: the printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand
// for themselves; the other 68 bytes, in byte order, for U+0100, U+0101, ...
struct ByteMap {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // every mapped code point is below U+0144
  ByteMap() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[size_t(b)] = printable ? uint32_t(b) : next++;
      to_byte[to_char[size_t(b)]] = int16_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

uint32_t BpeTokenizer::byte_char(uint8_t b) { return byte_map().to_char[b]; }

int BpeTokenizer::char_byte(uint32_t cp) {
  return cp < byte_map().to_byte.size() ? byte_map().to_byte[cp] : -1;
}

std::vector<std::pair<size_t, size_t>> BpeTokenizer::pre_tokenize(std::string_view text, size_t base,
                                                                  std::string_view what) {
  if (text.size() > size_t(INT32_MAX)) throw ArgumentError("BpeTokenizer: text longer than 2^31 - 1 bytes");
  std::vector<CodePoint> cps;
  cps.reserve(text.size());
  const int32_t n_bytes = int32_t(text.size());
  for (int32_t i = 0; i < n_bytes;) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(text.data(), i, n_bytes, c);
    if (c < 0)
      throw ArgumentError(std::string(what) + " is not valid UTF-8 at byte " +
                          std::to_string(base + size_t(at)));
    cps.push_back({c, classify(c), size_t(at)});
  }
  const size_t n = cps.size();
  const auto offset = [&](size_t k) { return k < n ? cps[k].begin : text.size(); };
  const auto cls_at = [&](size_t k) { return k < n ? cps[k].cls : CharClass::other; };
  const auto run_of = [&](size_t k, auto&& in) {
    while (k < n && in(cps[k].cls)) ++k;
    return k;
  };

  std::vector<std::pair<size_t, size_t>> out;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    const UChar32 c = cps[i].c;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (c == '\'' && i + 1 < n) {
      const UChar32 c1 = cps[i + 1].c, c2 = i + 2 < n ? cps[i + 2].c : 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        end = i + 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        end = i + 3;
    }
    if (end == i) {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space (U+0020), then a run of
      // one class. Without the space the run would have to start with the space itself, which is
      // \s: so only the form with it can match there.
      const size_t j = c == ' ' ? i + 1 : i;
      const CharClass cls = cls_at(j);
      if (j < n && cls != CharClass::space) {
        if (cls == CharClass::other)
          end = run_of(j, [](CharClass k) { return k == CharClass::other; });
        else
          end = run_of(j, [cls](CharClass k) { return k == cls; });
      }
    }
    if (end == i) {
      // `\s+(?!\S)` then `\s+`: a whitespace run up to the end of the text is one pre-token; one
      // followed by something else leaves its last character to start the next pre-token (when
      // the run is longer than one character).
      const size_t k = run_of(i, [](CharClass x) { return x == CharClass::space; });
      end = (k == n || k - i == 1) ? k : k - 1;
    }
    out.emplace_back(offset(i), offset(end));
    i = end;
  }
  return out;
}

}  // namespace mixtrain
