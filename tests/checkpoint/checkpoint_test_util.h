// Helpers for the checkpoint tests: hand-made safetensors images (a header string and a buffer),
// and a check that a call fails with one error type and a one-line message naming the file.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mixtrain/core/error.h"

namespace mixtrain::testing_ckpt {

// 8-byte little-endian length, the header text, then `buffer_bytes` bytes of data (0, 1, 2, ...).
inline std::vector<uint8_t> image(const std::string& header, size_t buffer_bytes) {
  std::vector<uint8_t> out(8 + header.size() + buffer_bytes);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < buffer_bytes; ++i) out[8 + header.size() + i] = static_cast<uint8_t>(i);
  return out;
}

// Runs f, expects an exception of type E whose message is one line and contains every needle.
template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << *needles.begin();
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// A fresh empty directory under the system temp dir, removed by the destructor.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("mixtrain_ckpt_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            std::to_string(reinterpret_cast<uintptr_t>(this)) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace mixtrain::testing_ckpt
