// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
// all little-endian (the format of TensorFlow's lib/io/record_writer.cc). CRC-32C is the
// Castagnoli polynomial (RFC 3720, iSCSI); the mask rotates it and adds a constant, as
// TensorFlow's crc32c::Mask does, so a CRC stored inside checksummed data does not checksum
// trivially. Debian packages no CRC-32C library for C++ (Google's crc32c is not in bookworm):
// this is the bytewise table form.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixtrain {

// crc32c("123456789") == 0xE3069283. `crc` continues a previous call (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// ((crc >> 15) | (crc << 17)) + 0xa282ead8
uint32_t mask_crc32c(uint32_t crc);

// One framed record holding `data`.
std::string tfrecord_frame(std::string_view data);

// The records of a TFRecord byte string, in order. Reading stops at the first record that is
// incomplete or whose length or data CRC does not match (the tail a killed writer leaves);
// `valid_bytes` (if given) receives the length of the intact prefix.
std::vector<std::string> tfrecord_parse(std::string_view bytes, size_t* valid_bytes = nullptr);

}  // namespace mixtrain
