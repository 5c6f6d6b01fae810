// TFRecord framing and CRC-32C (train/tfrecord.h).
#include "train/tfrecord.h"

#include <array>
#include <cstring>

#include "core/crc.h"

namespace mixtrain {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  return crc32_reflected<0x82F63B78u>(data, n, crc);
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc32c(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, mask_crc32c(crc32c(data.data(), data.size())), 4);
  return out;
}

std::vector<std::string> tfrecord_parse(std::string_view bytes, size_t* valid_bytes) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (bytes.size() - pos >= 12) {
    const char* h = bytes.data() + pos;
    const uint64_t len = get_le(h, 8);
    if (get_le(h + 8, 4) != mask_crc32c(crc32c(h, 8))) break;
    if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) break;
    const std::string_view data = bytes.substr(pos + 12, len);
    if (get_le(h + 12 + len, 4) != mask_crc32c(crc32c(data.data(), data.size()))) break;
    records.emplace_back(data);
    pos += 16 + len;
  }
  if (valid_bytes) *valid_bytes = pos;
  return records;
}

}  // namespace mixtrain
