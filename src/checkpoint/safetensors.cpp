// safetensors reader (validating everything, see the header) and writer.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

struct StDtype {
  const char* name;
  size_t size;
};
// Every dtype of the safetensors specification (the reader accepts a file holding any of them;
// only the ones with a DType become Tensors).
constexpr StDtype kStDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                                 {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                                 {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

size_t st_dtype_size(const std::string& name) {
  for (const auto& d : kStDtypes)
    if (name == d.name) return d.size;
  return 0;
}

[[noreturn]] void fail(const std::string& file, const std::string& problem) {
  throw IoError("safetensors file " + file + ": " + problem);
}

std::string quote(const nlohmann::json& v) { return json_excerpt(v); }

// Reads a non-negative JSON integer into out; false for anything else (floats, negatives, > 2^63-1).
bool get_index(const nlohmann::json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return out <= static_cast<uint64_t>(INT64_MAX);
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    out = static_cast<uint64_t>(s);
    return true;
  }
  return false;
}

}  // namespace

bool is_valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF)
      len = 2, cp = c & 0x1Fu;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, cp = c & 0x0Fu;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, cp = c & 0x07u;
    else
      return false;  // continuation byte first, overlong 2-byte lead (C0, C1), or past F4
    if (i + static_cast<size_t>(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + static_cast<size_t>(k)] & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (p[i + static_cast<size_t>(k)] & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::f8_e4m3:
      return "F8_E4M3";
    case DType::f8_e5m2:
      return "F8_E5M2";
    case DType::f64:
      return "F64";
    case DType::i32:
      return "I32";
    case DType::i8:
      return "I8";
  }
  return "";
}

bool dtype_from_safetensors(const std::string& name, DType& out) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2, DType::f64, DType::i32,
                  DType::i8})
    if (safetensors_dtype_name(t) == name) {
      out = t;
      return true;
    }
  return false;
}

SafetensorsFile SafetensorsFile::read(const std::string& path, uint64_t max_bytes) {
  return parse(read_file_bounded(path, max_bytes, "safetensors file"), path);
}

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, const std::string& file) {
  SafetensorsFile f;
  f.name_ = file;
  const uint64_t size = bytes.size();
  if (size < 8)
    fail(file, "truncated: " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian (static_assert above)
  if (n > kSafetensorsMaxHeader)
    fail(file,
         "header length " + std::to_string(n) + " exceeds the 100 MB limit (corrupt or not safetensors)");
  if (n > size - 8)
    fail(file, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes): truncated or corrupt");
  if (n < 2 || bytes[8] != '{') fail(file, "header does not start with a JSON object");
  const uint64_t buffer_size = size - 8 - n;

  // Duplicate keys are refused (nlohmann would keep the last silently; the reference
  // implementation's serde rejects them), and so is deep nesting (json_input.h).
  const nlohmann::json header = parse_untrusted_json(
      std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<size_t>(n)),
      "safetensors file " + file + ": header");
  if (!header.is_object()) fail(file, "header is not a JSON object");

  for (auto& [key, value] : header.items()) {
    if (!is_valid_utf8(key)) fail(file, "tensor name '" + printable(key) + "' is not valid UTF-8");
    if (key == "__metadata__") {
      if (!value.is_object()) fail(file, "__metadata__ must be an object of strings, got " + quote(value));
      for (auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail(file, "__metadata__ value '" + printable(mk) + "' must be a string, got " + quote(mv));
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + printable(key) + "'";
    if (key.empty()) fail(file, "a tensor has an empty name");
    if (!value.is_object()) fail(file, what + ": entry must be an object, got " + quote(value));
    for (auto& [field, fv] : value.items()) {
      (void)fv;
      if (field != "dtype" && field != "shape" && field != "data_offsets")
        fail(file, what + ": unknown field '" + printable(field) + "'");
    }
    SafetensorsEntry e;
    e.name = key;
    const auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string()) fail(file, what + ": 'dtype' must be a string");
    e.dtype = dt->get<std::string>();
    e.element_size = st_dtype_size(e.dtype);
    if (e.element_size == 0) fail(file, what + ": unknown dtype '" + printable(e.dtype) + "'");
    const auto sh = value.find("shape");
    if (sh == value.end() || !sh->is_array()) fail(file, what + ": 'shape' must be an array of integers");
    if (sh->size() > static_cast<size_t>(kMaxDims))
      fail(file, what + ": " + std::to_string(sh->size()) + " dimensions, more than the " +
                     std::to_string(kMaxDims) + " supported");
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *sh) {
      uint64_t extent = 0;
      if (!get_index(d, extent))
        fail(file, what + ": shape extent " + quote(d) + " is not a non-negative integer");
      e.shape.push_back(static_cast<int64_t>(extent));
      overflow = overflow || __builtin_mul_overflow(numel, extent, &numel);
    }
    uint64_t nbytes = 0;
    if (overflow || numel > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(numel, e.element_size, &nbytes))
      fail(file, what + ": shape " + shape_text(e.shape) + " has more elements than can exist");
    e.numel = static_cast<int64_t>(numel);
    const auto off = value.find("data_offsets");
    if (off == value.end() || !off->is_array() || off->size() != 2 || !get_index((*off)[0], e.begin) ||
        !get_index((*off)[1], e.end))
      fail(file, what + ": 'data_offsets' must be two non-negative integers");
    const std::string offsets = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) fail(file, what + ": data_offsets " + offsets + " end before they begin");
    if (e.end > buffer_size)
      fail(file, what + ": data_offsets " + offsets + " run past the data buffer (" +
                     std::to_string(buffer_size) + " bytes): truncated or corrupt");
    if (e.end - e.begin != nbytes)
      fail(file, what + ": data_offsets span " + std::to_string(e.end - e.begin) + " bytes but " + e.dtype +
                     " shape " + shape_text(e.shape) + " needs " + std::to_string(nbytes));
    f.entries_.push_back(std::move(e));
  }

  // The tensors must tile the buffer: sorted by offset, each starts where the previous ended.
  std::sort(f.entries_.begin(), f.entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : f.entries_) {
    if (e.begin < expected)
      fail(file, "tensors '" + printable(prev->name) + "' and '" + printable(e.name) +
                     "' overlap in the data buffer");
    if (e.begin > expected)
      fail(file, "the data buffer has " + std::to_string(e.begin - expected) +
                     " unused bytes before tensor '" + printable(e.name) + "'");
    expected = e.end;
    prev = &e;
  }
  if (expected != buffer_size)
    fail(file,
         "the data buffer has " + std::to_string(buffer_size - expected) + " bytes after the last tensor");
  for (size_t i = 0; i < f.entries_.size(); ++i) f.by_name_[f.entries_[i].name] = i;
  f.data_start_ = static_cast<size_t>(8 + n);
  f.bytes_ = std::move(bytes);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& tensor_name) const {
  const auto it = by_name_.find(tensor_name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& e, MemCategory category) const {
  DType t{};
  if (!dtype_from_safetensors(e.dtype, t))
    throw DTypeError("safetensors file " + name_ + ": tensor '" + printable(e.name) + "' has dtype " +
                     e.dtype + ", which mixtrain cannot hold");
  Shape shape;
  for (int64_t d : e.shape) shape.push_back(d);
  Tensor out = Tensor::empty(shape, t, category);
  if (out.nbytes() > 0 && !out.is_meta())
    std::memcpy(out.raw_data(), data(e), out.nbytes());  // meta: shape only
  return out;
}

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  if (name.empty() || !is_valid_utf8(name) || name == "__metadata__")
    throw ArgumentError("safetensors writer: invalid tensor name '" + printable(name) + "'");
  for (const auto& [n, _] : tensors_)
    if (n == name) throw ArgumentError("safetensors writer: duplicate tensor name '" + printable(name) + "'");
  if (safetensors_dtype_name(t.dtype()).empty())
    throw DTypeError("safetensors writer: tensor '" + name + "' has no safetensors dtype");
  tensors_.emplace_back(name, t.contiguous());  // shares t's storage when t is contiguous
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int d = 0; d < t.dim(); ++d) shape.push_back(t.size(d));
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // the buffer starts 8-byte aligned
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t pos = 8 + text.size();
  for (const auto& [_, t] : tensors_) {
    if (t.nbytes() > 0) std::memcpy(out.data() + pos, t.raw_data(), t.nbytes());
    pos += t.nbytes();
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  write_file_durable(path, bytes.data(), bytes.size());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "(";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + ")";
}

}  // namespace mixtrain
