// The safetensors reader and writer: bit-exact round trips of every dtype, and every kind of
// malformed or malicious file rejected with a one-line IoError naming the file and the problem.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>

#include "checkpoint/checkpoint_test_util.h"
#include "core/file_io.h"

namespace mixtrain {
namespace {

using testing_ckpt::expect_error;
using testing_ckpt::image;

SafetensorsFile parse(const std::string& header, size_t buffer) {
  return SafetensorsFile::parse(image(header, buffer), "t.st");
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  SafetensorsWriter w;
  std::vector<std::pair<std::string, Tensor>> in;
  const DType types[] = {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2, DType::f64};
  for (int k = 0; k < 6; ++k)
    in.emplace_back("t" + std::to_string(k), Tensor::randn({3, 5, 2}, types[k], 7 + k));
  in.emplace_back("ids", Tensor::from_ints({1, -2, 3}, {3}));
  in.emplace_back("scalar", Tensor::full({}, DType::f32, 2.5));
  in.emplace_back("empty", Tensor::zeros({0, 4}, DType::f32));
  // A non-contiguous view is written in row-major order.
  Tensor base = Tensor::randn({4, 6}, DType::f32, 3);
  in.emplace_back("transposed", base.transpose(0, 1));
  for (auto& [n, t] : in) w.add(n, t);
  w.set_metadata("format", "pt");
  w.set_metadata("note", "h\xC3\xA9llo");
  const std::vector<uint8_t> bytes = w.serialize();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "buffer must start 8-byte aligned";

  const SafetensorsFile f = SafetensorsFile::parse(bytes, "mem");
  EXPECT_EQ(f.entries().size(), in.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "h\xC3\xA9llo");
  for (auto& [name, t] : in) {
    const SafetensorsEntry* e = f.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_TRUE(same_bytes(f.tensor(*e), t.contiguous())) << name;
  }
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, WriterRejectsBadNames) {
  SafetensorsWriter w;
  w.add("a", Tensor::zeros({1}, DType::f32));
  expect_error<ArgumentError>([&] { w.add("a", Tensor::zeros({1}, DType::f32)); }, {"duplicate", "'a'"});
  expect_error<ArgumentError>([&] { w.add("", Tensor::zeros({1}, DType::f32)); }, {"invalid tensor name"});
  expect_error<ArgumentError>([&] { w.add("\xFF", Tensor::zeros({1}, DType::f32)); },
                              {"invalid tensor name"});
  expect_error<ArgumentError>([&] { w.add("__metadata__", Tensor::zeros({1}, DType::f32)); }, {"invalid"});
}

TEST(Safetensors, AcceptsForeignDtypesButDoesNotConvertThem) {
  const SafetensorsFile f = parse(R"({"x":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16);
  ASSERT_NE(f.find("x"), nullptr);
  expect_error<DTypeError>([&] { (void)f.tensor(*f.find("x")); }, {"t.st", "'x'", "I64"});
}

TEST(Safetensors, EmptyFileOfNoTensorsIsValid) {
  EXPECT_TRUE(parse("{}", 0).entries().empty());
  EXPECT_TRUE(parse("{}      ", 0).entries().empty());  // space padding, as the writer pads
}

struct Hostile {
  const char* what;
  std::string header;
  size_t buffer;
  const char* needle;
};

TEST(Safetensors, RejectsHostileHeaders) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const Hostile cases[] = {
      {"not JSON", "{\"a\": ", 0, "not valid JSON"},
      {"array header", "[1, 2]", 0, "does not start with a JSON object"},
      {"two objects", "{} {}", 0, "not valid JSON"},
      {"duplicate names", "{" + ok_entry + "," + ok_entry + "}", 8, "duplicate key 'a'"},
      {"duplicate metadata keys", R"({"__metadata__":{"k":"1","k":"2"}})", 0, "duplicate key 'k'"},
      {"non-UTF-8 name", "{\"a\xFF\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
       "not valid JSON"},
      {"lone surrogate name", R"({"\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
       "not valid JSON"},
      {"empty name", R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, "empty name"},
      {"entry not an object", R"({"a":[1,2]})", 0, "must be an object"},
      {"unknown field", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
       "unknown field 'x'"},
      {"dtype missing", R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, "'dtype' must be a string"},
      {"dtype a number", R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4,
       "'dtype' must be a string"},
      {"unknown dtype", R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16,
       "unknown dtype 'F128'"},
      {"shape a string", R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8,
       "'shape' must be an array"},
      {"negative extent", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
       "not a non-negative"},
      {"float extent", R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8,
       "not a non-negative"},
      {"too many dims", R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4,
       "dimensions"},
      {"overflowing shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
       8, "more elements than can exist"},
      {"overflowing bytes", R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", 8,
       "more elements than can exist"},
      {"huge extent", R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8,
       "not a non-negative"},
      {"offsets not two", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "two non-negative"},
      {"offsets negative", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8,
       "two non-negative"},
      {"offsets reversed", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8,
       "end before they begin"},
      {"offsets past the buffer", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "run past the data"},
      {"offsets past 2^64", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,7]}})", 8,
       "two non-negative"},
      {"size does not match shape", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "needs 12"},
      {"wrong dtype for size", R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8, "needs 16"},
      {"overlapping tensors",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlap"},
      {"same range twice",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       8, "overlap"},
      {"gap in the buffer", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "unused bytes"},
      {"trailing bytes", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12,
       "after the last tensor"},
      {"metadata not an object", R"({"__metadata__":"x"})", 0, "__metadata__ must be an object"},
      {"metadata value not a string", R"({"__metadata__":{"k":1}})", 0, "must be a string"},
      {"nested metadata", R"({"__metadata__":{"k":{"a":"b"}}})", 0, "must be a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    expect_error<IoError>([&] { parse(c.header, c.buffer); }, {"safetensors file t.st: ", c.needle});
  }
}

TEST(Safetensors, RejectsBadLengths) {
  for (size_t n = 0; n < 8; ++n)
    expect_error<IoError>([&] { SafetensorsFile::parse(std::vector<uint8_t>(n, 0), "t.st"); },
                          {"t.st", "truncated"});
  std::vector<uint8_t> bytes = image("{}", 0);
  const uint64_t beyond = 1000;
  std::memcpy(bytes.data(), &beyond, 8);
  expect_error<IoError>([&] { SafetensorsFile::parse(bytes, "t.st"); },
                        {"t.st", "runs past the end of the file"});
  const uint64_t huge = ~uint64_t{0};
  std::memcpy(bytes.data(), &huge, 8);
  expect_error<IoError>([&] { SafetensorsFile::parse(bytes, "t.st"); }, {"t.st", "100 MB"});
  const uint64_t zero = 0;
  std::memcpy(bytes.data(), &zero, 8);
  expect_error<IoError>([&] { SafetensorsFile::parse(bytes, "t.st"); }, {"t.st", "JSON object"});
}

// Every prefix of a valid file is rejected (never a crash, never a partial success).
TEST(Safetensors, EveryTruncationIsAnError) {
  SafetensorsWriter w;
  w.add("a", Tensor::randn({3, 4}, DType::bf16, 1));
  w.add("b", Tensor::randn({5}, DType::f32, 2));
  const std::vector<uint8_t> full = w.serialize();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(SafetensorsFile::parse(part, "t.st"), IoError) << n;
  }
  EXPECT_NO_THROW(SafetensorsFile::parse(full, "t.st"));
}

// Single-byte corruption anywhere in the header: parsed or rejected with IoError, nothing else.
TEST(Safetensors, ByteFlipsInTheHeaderNeverCrash) {
  SafetensorsWriter w;
  w.add("h.0.attn.c_attn.weight", Tensor::randn({2, 6}, DType::f32, 1));
  w.add("h.0.ln_1.bias", Tensor::randn({2}, DType::f16, 2));
  w.set_metadata("format", "pt");
  const std::vector<uint8_t> full = w.serialize();
  uint64_t n = 0;
  std::memcpy(&n, full.data(), 8);
  const uint8_t values[] = {0x00, 0x22, 0x2C, 0x30, 0x39, 0x5B, 0x5D, 0x7B, 0x7D, 0x80, 0xFF};
  int rejected = 0;
  for (size_t i = 0; i < 8 + n; ++i)
    for (uint8_t v : values) {
      std::vector<uint8_t> bad = full;
      bad[i] = v;
      try {
        const SafetensorsFile f = SafetensorsFile::parse(bad, "t.st");
        for (const auto& e : f.entries()) (void)f.tensor(e);
      } catch (const IoError& e) {
        ++rejected;
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      } catch (const DTypeError&) {
        ++rejected;
      }
    }
  EXPECT_GT(rejected, 0);
}

TEST(Safetensors, ReadNamesTheFile) {
  testing_ckpt::TempDir dir;
  expect_error<IoError>([&] { SafetensorsFile::read(dir / "missing.safetensors"); }, {"missing.safetensors"});
  expect_error<IoError>([&] { SafetensorsFile::read(dir.path.string()); }, {"not a regular file"});
  ASSERT_EQ(::mkfifo((dir / "fifo.safetensors").c_str(), 0600), 0);  // must not block on open
  expect_error<IoError>([&] { SafetensorsFile::read(dir / "fifo.safetensors"); },
                        {"fifo.safetensors", "not a regular file"});
  const std::vector<uint8_t> bytes = image("{\"a\":1}", 0);
  write_file_durable(dir / "bad.safetensors", bytes.data(), bytes.size());
  expect_error<IoError>([&] { SafetensorsFile::read(dir / "bad.safetensors"); }, {"bad.safetensors", "'a'"});
  expect_error<IoError>([&] { SafetensorsFile::read(dir / "bad.safetensors", 4); }, {"too large"});
}

TEST(Safetensors, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));          // truncated
}

}  // namespace
}  // namespace mixtrain
