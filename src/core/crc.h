// Table-driven reflected CRCs of 32 bits, one byte per step (checksums of files and records, not a
// hot path): CRC-32 (polynomial 0x04C11DB7, reflected 0xEDB88320) for checkpoints, CRC-32C
// (Castagnoli, 0x1EDC6F41, reflected 0x82F63B78) for TensorBoard's TFRecord framing. `crc` is a
// previous result to continue from (0 to start).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace mixtrain {

template <uint32_t ReflectedPoly>
uint32_t crc32_reflected(const void* data, size_t n, uint32_t crc) {
  static constexpr std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ ReflectedPoly : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

}  // namespace mixtrain
