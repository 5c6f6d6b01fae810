// A corpus encoded once by a tokenizer (data/bpe_tokenizer.h) and kept as a token file, which
// TextCorpus::from_token_file memory-maps: training on it reads ids, not text, and a run never
// tokenizes twice. The text is split as TextCorpus splits bytes (the last llround(size *
// val_fraction) bytes validate; the cut moved back to the start of a UTF-8 character), and each
// part is encoded on its own, so the validation tokens stand for exactly the validation bytes
// (bits per byte = loss per token * val_tokens / val_text_bytes / ln 2).
//
// Format (little-endian), a 128-byte header then the ids:
//   0  "MXTOKEN1"          magic
//   8  u32 width            bytes per id: 2 (vocabulary <= 65,536) or 4
//   12 u32 0
//   16 u64 vocab_size       every id is below it (checked on load)
//   24 u64 train_tokens, 32 u64 val_tokens
//   40 u64 train_text_bytes, 48 u64 val_text_bytes
//   56 char[16]             the tokenizer's fingerprint (BpeTokenizer::fingerprint)
//   72 u64 source_bytes, 80 u32 source_crc32   the text it was made from (size, CRC-32)
//   84 u32 payload_crc32    CRC-32 of the ids
//   88 u32 header_crc32     CRC-32 of bytes 0-87
//   92 zero padding to 128
//   128 ids: train_tokens then val_tokens, `width` bytes each
// Written to a temporary file renamed into place: never half-written.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "mixtrain/data/bpe_tokenizer.h"

namespace mixtrain {

struct TokenFileInfo {
  uint32_t width = 0;
  int64_t vocab_size = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_text_bytes = 0, val_text_bytes = 0;
  std::string tokenizer;  // fingerprint
  int64_t source_bytes = 0;
  uint32_t source_crc32 = 0;
};

// The (size, CRC-32) a token file records of its text.
uint32_t text_crc32(std::string_view text);

// Encodes `text` (named `source` in messages) and writes the token file at `path`. ArgumentError
// for text that is not UTF-8 or val_fraction outside (0, 1); IoError when the file cannot be
// written. Returns what the header says.
TokenFileInfo write_token_file(const std::string& path, const BpeTokenizer& tokenizer, std::string_view text,
                               const std::string& source, double val_fraction = 0.1);

// The header of a token file, checked (magic, its CRC, sizes against the file's): IoError naming
// the file and what is wrong.
TokenFileInfo read_token_file_info(const std::string& path);

}  // namespace mixtrain
