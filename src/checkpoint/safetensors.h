// The safetensors format (huggingface/safetensors, docs "Format"): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {string: string}}, then the byte buffer the offsets point into.
//
// Our own reader and writer rather than a library: Debian packages no C++ safetensors library,
// the format is tiny, and the reader is the first thing a hostile file reaches, so it must be
// ours to harden. The reader trusts nothing: header length against the file size and the 100 MB
// limit of the reference implementation, well-formed JSON with no duplicate keys, the type of
// every field, known dtype names, shapes whose element and byte counts cannot overflow,
// data_offsets inside the buffer that match the shape, do not overlap and cover it exactly, UTF-8
// non-empty names. Every failure is an IoError "safetensors file PATH: <problem>" on one line.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mixtrain/tensor/tensor.h"

namespace mixtrain {

// The reference implementation's limit on the JSON header (safetensors MAX_HEADER_SIZE).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // safetensors name: "F32", "BF16", "I64", ...
  size_t element_size = 0;     // bytes per element of that dtype
  std::vector<int64_t> shape;  // rank <= kMaxDims
  int64_t numel = 0;
  uint64_t begin = 0, end = 0;  // data_offsets: byte range in the buffer after the header
};

class SafetensorsFile {
 public:
  // Reads and validates a whole file (at most max_bytes). IoError as above.
  static SafetensorsFile read(const std::string& path, uint64_t max_bytes = uint64_t{1} << 36);
  // The same from bytes in memory (fuzzing, tests); `name` stands for the path in messages.
  static SafetensorsFile parse(std::vector<uint8_t> bytes, const std::string& name);

  const std::string& name() const { return name_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in data order
  const SafetensorsEntry* find(const std::string& tensor_name) const;        // null if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Pointer to the entry's first byte (entry.end - entry.begin bytes follow).
  const uint8_t* data(const SafetensorsEntry& e) const { return bytes_.data() + data_start_ + e.begin; }
  // A contiguous copy as a Tensor: dtypes F32, F16, BF16, F64, I32, F8_E4M3, F8_E5M2 (DTypeError
  // naming the file and tensor for the others). On the meta device: the shape and dtype, no bytes.
  Tensor tensor(const SafetensorsEntry& e, MemCategory category = MemCategory::other) const;

 private:
  std::string name_;
  std::vector<uint8_t> bytes_;
  size_t data_start_ = 0;  // 8 + N
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors and metadata and writes one file: header padded with spaces to a multiple of
// 8 bytes (so the buffer is aligned), tensors in the order added.
class SafetensorsWriter {
 public:
  // Keeps t (dtype f32, f16, bf16, f64, i32, f8_*), made contiguous; a contiguous t is not
  // copied, so its values must not change before serialize(). ArgumentError for a duplicate or
  // empty name, or a name that is not valid UTF-8.
  void add(const std::string& name, const Tensor& t);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  std::vector<uint8_t> serialize() const;
  // serialize() written durably (file_io.h: temp file, fsync, rename, directory fsync).
  void write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype name of a DType ("F32", ...), and back (false if it has none).
std::string safetensors_dtype_name(DType t);
bool dtype_from_safetensors(const std::string& name, DType& out);
// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(const std::string& s);
// A shape as the error messages print it: "(2, 3)", "()" for a scalar.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace mixtrain
