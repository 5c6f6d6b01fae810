// Token files: writing (encode a text once), reading the header, and TextCorpus::from_token_file
// (memory-mapped); see data/token_file.h.
#include "mixtrain/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/crc.h"
#include "core/file_io.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/text_corpus.h"

namespace mixtrain {

static_assert(std::endian::native == std::endian::little, "token files are little-endian, as this host");

namespace {

constexpr char kMagic[8] = {'M', 'X', 'T', 'O', 'K', 'E', 'N', '1'};
constexpr size_t kHeaderBytes = 128;
constexpr size_t kCrcdHeaderBytes = 88;

uint32_t crc32_of(const void* p, size_t n) { return crc32_reflected<0xEDB88320u>(p, n, 0); }

template <class T>
void put(std::vector<uint8_t>& h, size_t at, T v) {
  std::memcpy(h.data() + at, &v, sizeof v);
}
template <class T>
T get(const uint8_t* h, size_t at) {
  T v;
  std::memcpy(&v, h + at, sizeof v);
  return v;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Parses and checks a header against the file's size.
TokenFileInfo parse_header(const uint8_t* h, uint64_t file_bytes, const std::string& path) {
  const std::string what = "token file " + quoted(path);
  if (file_bytes < kHeaderBytes || std::memcmp(h, kMagic, sizeof kMagic) != 0)
    throw IoError(what + ": not a mixtrain token file (no MXTOKEN1 header)");
  if (get<uint32_t>(h, 88) != crc32_of(h, kCrcdHeaderBytes))
    throw IoError(what + ": the header's checksum does not match (the file is damaged)");
  TokenFileInfo info;
  info.width = get<uint32_t>(h, 8);
  info.vocab_size = int64_t(get<uint64_t>(h, 16));
  info.train_tokens = int64_t(get<uint64_t>(h, 24));
  info.val_tokens = int64_t(get<uint64_t>(h, 32));
  info.train_text_bytes = int64_t(get<uint64_t>(h, 40));
  info.val_text_bytes = int64_t(get<uint64_t>(h, 48));
  info.tokenizer.assign(reinterpret_cast<const char*>(h + 56), 16);
  info.source_bytes = int64_t(get<uint64_t>(h, 72));
  info.source_crc32 = get<uint32_t>(h, 80);
  const int64_t max = int64_t(1) << 48;
  if ((info.width != 2 && info.width != 4) || info.vocab_size < 1 || info.vocab_size > (int64_t(1) << 31) ||
      (info.width == 2 && info.vocab_size > 65536) || info.train_tokens < 0 || info.train_tokens > max ||
      info.val_tokens < 0 || info.val_tokens > max)
    throw IoError(what + ": the header's sizes are inconsistent");
  const uint64_t want = kHeaderBytes + uint64_t(info.train_tokens + info.val_tokens) * info.width;
  if (file_bytes != want)
    throw IoError(what + ": " + std::to_string(file_bytes) + " bytes, the header says " +
                  std::to_string(want) + " (a truncated or foreign file)");
  return info;
}

// The cut between train and validation text: as TextCorpus splits bytes, moved back to the start
// of a UTF-8 character.
size_t text_split(std::string_view text, double val_fraction) {
  size_t cut = text.size() - size_t(std::llround(double(text.size()) * val_fraction));
  while (cut > 0 && cut < text.size() && (uint8_t(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

}  // namespace

uint32_t text_crc32(std::string_view text) { return crc32_of(text.data(), text.size()); }

TokenFileInfo write_token_file(const std::string& path, const BpeTokenizer& tokenizer, std::string_view text,
                               const std::string& source, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw ArgumentError("token file: val_fraction must be in (0, 1), got " + std::to_string(val_fraction));
  if (text.empty()) throw IoError("data file " + quoted(source) + ": the file is empty");
  const size_t cut = text_split(text, val_fraction);
  std::vector<int32_t> train, val;
  try {
    train = tokenizer.encode(text.substr(0, cut));
    val = tokenizer.encode(text.substr(cut));
  } catch (const ArgumentError& e) {
    throw ArgumentError("data file " + quoted(source) + ": " + e.what());
  }
  TokenFileInfo info;
  info.width = tokenizer.vocab_size() <= 65536 ? 2 : 4;
  info.vocab_size = tokenizer.vocab_size();
  info.train_tokens = int64_t(train.size());
  info.val_tokens = int64_t(val.size());
  info.train_text_bytes = int64_t(cut);
  info.val_text_bytes = int64_t(text.size() - cut);
  info.tokenizer = tokenizer.fingerprint();
  info.source_bytes = int64_t(text.size());
  info.source_crc32 = text_crc32(text);

  std::vector<uint8_t> payload;
  payload.reserve((train.size() + val.size()) * info.width);
  for (const auto* part : {&train, &val})
    for (const int32_t id : *part) {
      const uint32_t v = uint32_t(id);
      for (uint32_t k = 0; k < info.width; ++k) payload.push_back(uint8_t(v >> (8 * k)));
    }
  std::vector<uint8_t> h(kHeaderBytes, 0);
  std::memcpy(h.data(), kMagic, sizeof kMagic);
  put<uint32_t>(h, 8, info.width);
  put<uint64_t>(h, 16, uint64_t(info.vocab_size));
  put<uint64_t>(h, 24, uint64_t(info.train_tokens));
  put<uint64_t>(h, 32, uint64_t(info.val_tokens));
  put<uint64_t>(h, 40, uint64_t(info.train_text_bytes));
  put<uint64_t>(h, 48, uint64_t(info.val_text_bytes));
  std::memcpy(h.data() + 56, info.tokenizer.data(), 16);
  put<uint64_t>(h, 72, uint64_t(info.source_bytes));
  put<uint32_t>(h, 80, info.source_crc32);
  put<uint32_t>(h, 84, crc32_of(payload.data(), payload.size()));
  put<uint32_t>(h, 88, crc32_of(h.data(), kCrcdHeaderBytes));

  write_file_durable(path, {{h.data(), h.size()}, {payload.data(), payload.size()}});
  return info;
}

TokenFileInfo read_token_file_info(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("token file " + quoted(path) + ": cannot be read (" + std::strerror(errno) + ")");
  struct stat st {};
  uint8_t h[kHeaderBytes] = {};
  const bool stat_ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const ssize_t got = stat_ok ? ::pread(fd, h, sizeof h, 0) : -1;
  ::close(fd);
  if (!stat_ok) throw IoError("token file " + quoted(path) + ": not a regular file");
  if (got < ssize_t(sizeof h)) throw IoError("token file " + quoted(path) + ": shorter than its header");
  return parse_header(h, uint64_t(st.st_size), path);
}

TextCorpus TextCorpus::from_token_file(const std::string& path) {
  const TokenFileInfo info = read_token_file_info(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("token file " + quoted(path) + ": cannot be read (" + std::strerror(errno) + ")");
  const size_t bytes = kHeaderBytes + size_t(info.train_tokens + info.val_tokens) * info.width;
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED)
    throw IoError("token file " + quoted(path) + ": cannot be mapped (" + std::strerror(errno) + ")");
  std::shared_ptr<const void> mapping(m, [bytes](const void* p) { ::munmap(const_cast<void*>(p), bytes); });
  const uint8_t* base = static_cast<const uint8_t*>(m);
  // The file may have changed since the header was read: check it again in the mapping.
  const TokenFileInfo again = parse_header(base, bytes, path);
  if (again.train_tokens != info.train_tokens || again.val_tokens != info.val_tokens)
    throw IoError("token file " + quoted(path) + ": changed while it was read");
  if (get<uint32_t>(base, 84) != crc32_of(base + kHeaderBytes, bytes - kHeaderBytes))
    throw IoError("token file " + quoted(path) + ": the ids' checksum does not match (the file is damaged)");
  TextCorpus c;
  c.path_ = path;
  c.mapping_ = std::move(mapping);
  c.raw_ = base + kHeaderBytes;
  c.width_ = int(info.width);
  c.size_ = info.train_tokens + info.val_tokens;
  c.train_size_ = info.train_tokens;
  c.vocab_size_ = info.vocab_size;
  c.val_text_bytes_ = info.val_text_bytes;
  c.tokenizer_ = info.tokenizer;
  for (int64_t k = 0; k < c.size_; ++k)
    if (c.token(k) >= c.vocab_size_)
      throw IoError("token file " + quoted(path) + ": token " + std::to_string(k) + " is " +
                    std::to_string(c.token(k)) + ", not below the vocabulary size " +
                    std::to_string(c.vocab_size_));
  if (c.size_ == 0) throw IoError("token file " + quoted(path) + ": holds no tokens");
  return c;
}

}  // namespace mixtrain
