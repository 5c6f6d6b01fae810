// CRC-32 of checkpoint files (core/crc.h).
#include "checkpoint/checksum.h"

#include <array>
#include <cstdio>

#include "core/crc.h"

namespace mixtrain {

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  return crc32_reflected<0xEDB88320u>(data, n, crc);
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

}  // namespace mixtrain
