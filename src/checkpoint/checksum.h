// CRC-32 (IEEE 802.3, the zlib / PNG polynomial): the per-file checksum of checkpoints. It
// catches torn writes and bit rot; it is not a defence against a deliberately forged file (the
// readers validate every field for that).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mixtrain {

// crc32("123456789") == 0xCBF43926. `crc` continues a previous call (0 to start).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
// Eight lower-case hex digits, as stored in manifests.
std::string crc32_hex(uint32_t crc);

}  // namespace mixtrain
