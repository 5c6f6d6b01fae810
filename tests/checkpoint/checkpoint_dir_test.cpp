// Checkpoint directories: complete checkpoints read back verified; a torn, corrupt or incomplete
// one is refused naming the problem, and resolve_checkpoint falls back to the one before it.
#include "checkpoint/checkpoint_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/checksum.h"
#include "core/file_io.h"

namespace fs = std::filesystem;

namespace mixtrain {
namespace {

using testing_ckpt::expect_error;
using testing_ckpt::TempDir;

std::vector<CheckpointFile> files_for(int64_t step) {
  std::vector<CheckpointFile> f(2);
  f[0].name = "a.bin";
  f[0].bytes.assign(1000, static_cast<uint8_t>(step));
  f[1].name = "b.bin";
  f[1].bytes = {1, 2, 3};
  return f;
}

void flip_byte(const std::string& path, size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(Checksum, KnownValues) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);  // continues across calls
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
}

TEST(CheckpointDir, WriteReadRoundTrip) {
  TempDir d;
  const std::string dir = d / "ck";
  const std::string path = write_checkpoint(dir, 20, files_for(20), {{"precision", "bf16-mixed"}});
  EXPECT_EQ(fs::path(path).filename(), "step-000020");
  const LoadedCheckpoint c = read_checkpoint(path);
  EXPECT_EQ(c.step, 20);
  EXPECT_EQ(c.info["precision"], "bf16-mixed");
  EXPECT_EQ(c.files.at("a.bin"), files_for(20)[0].bytes);
  EXPECT_EQ(c.files.at("b.bin"), files_for(20)[1].bytes);
  EXPECT_TRUE(is_single_checkpoint(path));
  EXPECT_FALSE(is_single_checkpoint(dir));
  // Nothing but the checkpoint is left behind (no temporary files or directories).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(path), fs::directory_iterator()), 3);
}

TEST(CheckpointDir, DetectsCorruption) {
  TempDir d;
  const std::string dir = d / "ck";
  const std::string path = write_checkpoint(dir, 4, files_for(4), nlohmann::ordered_json::object());
  flip_byte(path + "/a.bin", 500);
  expect_error<IoError>([&] { read_checkpoint(path); }, {path, "a.bin fails its CRC-32 check"});
  fs::resize_file(path + "/a.bin", 10);
  expect_error<IoError>([&] { read_checkpoint(path); }, {path, "a.bin has 10 bytes, the manifest says 1000"});
  fs::remove(path + "/a.bin");
  expect_error<IoError>([&] { read_checkpoint(path); }, {path, "a.bin is missing"});

  const std::string p2 = write_checkpoint(dir, 5, files_for(5), nlohmann::ordered_json::object());
  std::string manifest;
  {
    std::ifstream f(p2 + "/manifest.json");
    manifest.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t at = manifest.find("\"step\": 5");
  ASSERT_NE(at, std::string::npos);
  std::string tampered = manifest;
  tampered.replace(at, 9, "\"step\": 6");
  write_file_durable(p2 + "/manifest.json", tampered);
  expect_error<IoError>([&] { read_checkpoint(p2); }, {p2, "manifest.json checksum mismatch"});
  write_file_durable(p2 + "/manifest.json", manifest.substr(0, manifest.size() / 2));
  expect_error<IoError>([&] { read_checkpoint(p2); }, {p2, "manifest.json is not valid JSON"});
  write_file_durable(p2 + "/manifest.json", "[]");
  expect_error<IoError>([&] { read_checkpoint(p2); }, {p2, "not a JSON object"});
  fs::remove(p2 + "/manifest.json");
  expect_error<IoError>([&] { read_checkpoint(p2); }, {p2, "no manifest.json"});
}

TEST(CheckpointDir, ResolveFallsBackToTheLastValidOne) {
  TempDir d;
  const std::string dir = d / "ck";
  auto ok = [](const LoadedCheckpoint&) {};
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) { warnings.push_back(w); };
  EXPECT_THROW(resolve_checkpoint(dir, ok, warn), IoError);  // absent
  fs::create_directories(dir);
  EXPECT_FALSE(resolve_checkpoint(dir, ok, warn).has_value());  // present, empty
  for (int64_t s : {2, 4, 6}) write_checkpoint(dir, s, files_for(s), nlohmann::ordered_json::object());
  EXPECT_EQ(resolve_checkpoint(dir, ok, warn)->step, 6);
  EXPECT_TRUE(warnings.empty());
  // Newest corrupt, next one incomplete (no manifest, as a kill mid-write would leave it if it
  // were ever renamed), a stale temporary directory: step 2 is used, the two skipped named.
  flip_byte(dir + "/step-000006/a.bin", 3);
  fs::remove(dir + "/step-000004/manifest.json");
  fs::create_directories(dir + "/.step-000008.tmp");
  const auto c = resolve_checkpoint(dir, ok, warn);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 2);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("step-000006"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("step-000004"), std::string::npos) << warnings[1];
  // Content rejected by the caller's check counts as invalid too.
  warnings.clear();
  auto refuse_2 = [](const LoadedCheckpoint& l) {
    if (l.step == 2) throw IoError("bad content");
  };
  expect_error<IoError>([&] { resolve_checkpoint(dir, refuse_2, warn); },
                        {"no valid checkpoint in", "3 found", "step-000006"});
  // A single checkpoint named directly: its problems are errors, not fallbacks.
  expect_error<IoError>([&] { resolve_checkpoint(dir + "/step-000006", ok, warn); }, {"CRC-32"});
  EXPECT_EQ(resolve_checkpoint(dir + "/step-000002", ok, warn)->step, 2);
  // Writing again cleans the stale temporary directory and replaces a step that exists.
  write_checkpoint(dir, 6, files_for(6), nlohmann::ordered_json::object());
  EXPECT_FALSE(fs::exists(dir + "/.step-000008.tmp"));
  EXPECT_EQ(read_checkpoint(dir + "/step-000006").step, 6);
}

TEST(CheckpointDir, PruneKeepsTheNewest) {
  TempDir d;
  const std::string dir = d / "ck";
  for (int64_t s : {10, 2, 30, 4}) write_checkpoint(dir, s, files_for(s), nlohmann::ordered_json::object());
  auto all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.front().first, 2);
  EXPECT_EQ(all.back().first, 30);
  prune_checkpoints(dir, 2);
  all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 10);
  EXPECT_EQ(all[1].first, 30);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
  prune_checkpoints(dir, 0);  // 0: keep all
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
}

}  // namespace
}  // namespace mixtrain
