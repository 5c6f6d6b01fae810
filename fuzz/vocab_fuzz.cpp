// libFuzzer target: the WordPiece vocabulary reader (a model directory's vocab.txt:
// WordPieceTokenizer::from_vocab_file, which reads lines and trims them before from_tokens checks
// the tokens), on any bytes written to a file as a user hands it over. A vocabulary that loads
// then tokenizes a few fixed texts (specials written literally, pieces, accents, CJK, a word past
// 100 characters, pairs with truncation, padding), so WordPiece runs over hostile tokens. Inputs
// must load or throw mixtrain::Error; every id that comes out must be in the vocabulary.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_init.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/wordpiece.h"

namespace {

// The input file, in a directory of this process's own (removed by the OS's tmp cleaning).
const std::string& vocab_path() {
  static const std::string path = [] {
    char t[] = "/tmp/mixtrain-vocab-fuzz-XXXXXX";
    if (mkdtemp(t) == nullptr) abort();
    return std::string(t) + "/vocab.txt";
  }();
  return path;
}

void write(const std::string& path, const uint8_t* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, n, f) != n || std::fclose(f) != 0) abort();
}

void check_ids(const mixtrain::WordPieceTokenizer& t, const std::vector<int32_t>& ids) {
  for (const int32_t id : ids)
    if (id < 0 || id >= t.vocab_size() || t.token(id).empty()) __builtin_trap();
}

const char* const kTexts[] = {
    "Hello, World! The caf\xC3\xA9 was na\xC3\xAFve: unaffable ##s ## [CLS]x[SEP][MASK]y [unused0]",
    "\xE4\xB8\xAD\xE6\x96\x87 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 "
    "\xC3\x85ngstr\xC3\xB6m\xC2\xAD\xE2\x80\x8B a\tb\nc [PAD][UNK][PAD [",
    "supercalifragilisticexpialidocioussupercalifragilisticexpialidocious"
    "supercalifragilisticexpialidocious 1,234.5% $x^2 \xE2\x80\x94 "
    "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
    "",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = vocab_path();
  write(path, data, size);
  try {
    const mixtrain::WordPieceTokenizer t = mixtrain::WordPieceTokenizer::from_vocab_file(path);
    if (t.vocab_size() < 4 || t.id(t.token(t.unk_id())) != t.unk_id()) __builtin_trap();
    std::vector<mixtrain::Encoding> batch;
    for (const char* a : kTexts) {
      check_ids(t, t.tokenize(a));
      batch.push_back(t.encode(a));
      batch.push_back(t.encode(a, 5));
      if (batch.back().ids.size() > 5) __builtin_trap();
      for (const char* b : kTexts) {
        batch.push_back(t.encode_pair(a, b, 9));
        if (batch.back().ids.size() > 9) __builtin_trap();
      }
    }
    batch.push_back(t.encode_pair(kTexts[0], kTexts[1]));
    for (const mixtrain::Encoding& e : batch) check_ids(t, e.ids);
    const mixtrain::EncodedBatch e = t.pad(batch);
    if (e.input_ids.size() != size_t(e.B * e.T)) __builtin_trap();
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
