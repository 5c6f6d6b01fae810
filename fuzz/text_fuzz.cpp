// libFuzzer target: the text readers (the classification files: TSV, CSV, JSONL) and the
// WordPiece tokenizer (any bytes as text: basic tokenization, pieces, pairs with truncation,
// padding). The first byte picks the reader; the rest is the input. Inputs must be handled or
// throw mixtrain::Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_init.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/text_classification.h"
#include "mixtrain/data/wordpiece.h"

namespace {

// A small vocabulary with multi-byte tokens and continuation pieces, so every WordPiece path runs.
const mixtrain::WordPieceTokenizer& tokenizer() {
  static const mixtrain::WordPieceTokenizer t = [] {
    std::vector<std::string> v = {
        "[PAD]",    "[UNK]",      "[CLS]",        "[SEP]", "[MASK]", "a", "b",  "ab",  "##a",
        "##b",      "##ab",       "the",          "##s",   ",",      ".", "!",  "caf", "##e",
        "\xC3\xA9", "##\xC3\xA9", "\xE4\xB8\xAD", "na",    "##ive",  "x", "##x"};
    mixtrain::WordPieceTokenizer::Options o;
    o.max_chars_per_word = 24;
    return mixtrain::WordPieceTokenizer::from_tokens(std::move(v), "fuzz", o);
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint8_t mode = data[0] % 4;
  try {
    if (mode == 0) {
      const mixtrain::WordPieceTokenizer& t = tokenizer();
      (void)t.basic_tokenize(text);
      const size_t tab = text.find('\t');
      const std::string_view a = text.substr(0, tab),
                             b = tab == std::string_view::npos ? "" : text.substr(tab + 1);
      const int64_t max_len = 3 + data[0] / 4;
      std::vector<mixtrain::Encoding> batch = {t.encode(a), t.encode(a, max_len),
                                               t.encode_pair(a, b, max_len), t.encode_pair(a, b)};
      const mixtrain::EncodedBatch e = t.pad(batch);
      if (e.input_ids.size() != size_t(e.B * e.T)) __builtin_trap();
    } else {
      mixtrain::TextColumns c;
      c.text_pair = data[0] & 4 ? "b" : "";
      const mixtrain::TextFormat f = mode == 1   ? mixtrain::TextFormat::tsv
                                     : mode == 2 ? mixtrain::TextFormat::csv
                                                 : mixtrain::TextFormat::jsonl;
      const mixtrain::TextClassificationData d = mixtrain::TextClassificationData::parse(text, f, "fuzz", c);
      for (const mixtrain::TextExample& ex : d.examples)
        if (ex.label < 0 || size_t(ex.label) >= d.labels.size()) __builtin_trap();
    }
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
