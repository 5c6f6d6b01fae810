// CRC-32, table-driven (one byte per step: checkpoints are megabytes, this is not a hot path).
#include "checkpoint/checksum.h"

#include <array>
#include <cstdio>

namespace mixtrain {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;  // reflected 0x04C11DB7
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

}  // namespace mixtrain
