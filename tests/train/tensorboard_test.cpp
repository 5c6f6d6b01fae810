// TensorBoard event files (train/tfrecord.h, train/event_file.h, train/tensorboard_hook.h):
// CRC-32C against published vectors, the TFRecord framing (round trip, every corrupted or torn
// byte detected), the writer and reader, trimming for a resumed run, and the hook in a run.
// The files are also read by TensorBoard itself in tests/cli/tensorboard_cli_test.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mixtrain/train/tensorboard_hook.h"
#include "mixtrain/train/trainer.h"
#include "tiny_run.h"
#include "train/event_file.h"
#include "train/tfrecord.h"

namespace mixtrain {
namespace {
namespace fs = std::filesystem;

uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }

TEST(Crc32c, PublishedVectors) {
  // The "check" value of CRC-32C (Castagnoli) and the iSCSI vectors of RFC 3720, appendix B.4.
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string inc, dec;
  for (int i = 0; i < 32; ++i) {
    inc.push_back(static_cast<char>(i));
    dec.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc_of(inc), 0x46DD794Eu);
  EXPECT_EQ(crc_of(dec), 0x113FDB5Cu);
  EXPECT_EQ(crc_of(""), 0u);
}

TEST(Crc32c, ContinuesAcrossCalls) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(s.data() + 4, 5, crc32c(s.data(), 4)), 0xE3069283u);
}

TEST(Crc32c, MaskIsTensorFlows) {
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked by hand for two of the vectors above.
  EXPECT_EQ(mask_crc32c(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(mask_crc32c(0x8A9136AAu), 0x0FD7FFFAu);
}

TEST(TfRecord, FrameLayout) {
  const std::string data = "123456789";
  const std::string r = tfrecord_frame(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x09\0\0\0\0\0\0\0", 8));  // length, little-endian
  const uint32_t len_crc = mask_crc32c(crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(8, 4), std::string(reinterpret_cast<const char*>(&len_crc), 4));
  EXPECT_EQ(r.substr(12, 9), data);
  EXPECT_EQ(r.substr(21, 4), std::string("\xe5\xb0\x8a\xc7", 4));  // mask_crc32c(0xE3069283), little-endian
}

TEST(TfRecord, RoundTripAndEmptyRecord) {
  const std::string bytes =
      tfrecord_frame("first") + tfrecord_frame("") + tfrecord_frame(std::string(1000, 'x'));
  size_t valid = 0;
  const std::vector<std::string> r = tfrecord_parse(bytes, &valid);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], "first");
  EXPECT_EQ(r[1], "");
  EXPECT_EQ(r[2], std::string(1000, 'x'));
  EXPECT_EQ(valid, bytes.size());
}

TEST(TfRecord, EveryFlippedByteStopsTheReader) {
  const std::string first = tfrecord_frame("kept");
  const std::string second = tfrecord_frame("payload of the second record");
  for (size_t i = 0; i < second.size(); ++i) {
    std::string bytes = first + second;
    bytes[first.size() + i] ^= 0x10;
    size_t valid = 0;
    const std::vector<std::string> r = tfrecord_parse(bytes, &valid);
    ASSERT_EQ(r.size(), 1u) << "flipped byte " << i;
    EXPECT_EQ(valid, first.size());
  }
}

TEST(TfRecord, EveryTornTailIsDropped) {
  const std::string first = tfrecord_frame("kept");
  const std::string second = tfrecord_frame("torn");
  for (size_t cut = 0; cut < second.size(); ++cut) {
    size_t valid = 0;
    const std::vector<std::string> r = tfrecord_parse(first + second.substr(0, cut), &valid);
    ASSERT_EQ(r.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(valid, first.size());
  }
}

TEST(TfRecord, HugeLengthIsNotTrusted) {
  std::string bytes = tfrecord_frame("x");
  std::string header(8, '\xff');
  const uint32_t c = mask_crc32c(crc32c(header.data(), 8));
  header.append(reinterpret_cast<const char*>(&c), 4);  // a valid header claiming 2^64-1 bytes
  const std::vector<std::string> r = tfrecord_parse(bytes + header + "abcd");
  EXPECT_EQ(r.size(), 1u);
}

class TempDir : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mixtrain_tb_" + std::to_string(getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

using EventFiles = TempDir;

ScalarEvent scalar(int64_t step, float loss) {
  return ScalarEvent{step, 0, {{"train/loss", loss}, {"amp/skipped", 0}}};
}

TEST_F(EventFiles, WriteReadTrim) {
  {
    EventFileWriter w(dir_.string());
    EXPECT_EQ(fs::path(w.path()).filename().string().rfind("events.out.tfevents.", 0), 0u);
    for (int s = 1; s <= 5; ++s) w.write(scalar(s, 10.f - s));
  }
  {
    EventFileWriter w(dir_.string());  // a second file: its name sorts after the first
    w.write(scalar(6, 3.5f));
  }
  const std::vector<std::string> files = list_event_files(dir_.string());
  ASSERT_EQ(files.size(), 2u);
  std::vector<ScalarEvent> ev = read_scalar_events(dir_.string());
  ASSERT_EQ(ev.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ev[i].step, i + 1);
  EXPECT_EQ(ev[5].values[0].first, "train/loss");
  EXPECT_EQ(ev[5].values[0].second, 3.5f);
  EXPECT_GT(ev[0].wall_time, 1.6e9);

  EXPECT_EQ(trim_event_files(dir_.string(), 3), 3);  // steps 4, 5 of the first file, the second file
  EXPECT_EQ(list_event_files(dir_.string()).size(), 1u);
  ev = read_scalar_events(dir_.string());
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev.back().step, 3);
  EXPECT_EQ(trim_event_files(dir_.string(), 3), 0);  // nothing more to drop: the file is untouched
}

TEST_F(EventFiles, TornTailIsTrimmed) {
  std::string path;
  {
    EventFileWriter w(dir_.string());
    path = w.path();
    w.write(scalar(1, 1.f));
    w.write(scalar(2, 2.f));
  }
  fs::resize_file(path, fs::file_size(path) - 3);  // a write killed halfway through step 2
  ASSERT_EQ(read_scalar_events(dir_.string()).size(), 1u);
  EXPECT_EQ(trim_event_files(dir_.string(), 10), 1);
  EXPECT_EQ(read_scalar_events(dir_.string()).size(), 1u);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t valid = 0;
  tfrecord_parse(bytes, &valid);
  EXPECT_EQ(valid, bytes.size());  // the rewritten file ends on a record boundary
}

TEST_F(EventFiles, NotAnEventIsAnError) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "events.out.tfevents.1.host.1", std::ios::binary) << tfrecord_frame("\xff\xff\xff");
  try {
    read_scalar_events(dir_.string());
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("events.out.tfevents.1.host.1"), std::string::npos) << e.what();
  }
}

using TensorBoardHookTest = TempDir;

TEST_F(TensorBoardHookTest, NumericsAmaxPerSiteOnSampledSteps) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_bf16);
  o.steps = 3;
  o.force = true;
  o.tensorboard_dir = dir_.string();
  o.numerics.path = dir_.string() + ".numerics.jsonl";
  o.numerics.every = 2;  // steps 1 and 3
  train(o);
  const std::vector<ScalarEvent> ev = read_scalar_events(dir_.string());
  ASSERT_EQ(ev.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    float fc = -1, wte = -1;
    for (const auto& [tag, v] : ev[i].values) {
      if (tag == "numerics_amax/forward/transformer.h.0.mlp.c_fc:linear") fc = v;
      if (tag == "numerics_amax/weight/transformer.wte.weight") wte = v;
    }
    if (i == 1) {
      EXPECT_EQ(fc, -1.f) << "step 2 is not sampled";
      continue;
    }
    EXPECT_GT(fc, 0.f) << "step " << i + 1;
    EXPECT_GT(wte, 0.f) << "step " << i + 1;
  }
  fs::remove(o.numerics.path);
}

TEST_F(TensorBoardHookTest, OneEventPerStepWithTheStepLogScalars) {
  TrainOptions o = train_test::tiny_run(PrecisionMode::mixed_bf16);
  o.steps = 3;
  o.eval_every = 2;
  o.tensorboard_dir = dir_.string();
  const TrainSummary s = train(o);
  const std::vector<ScalarEvent> ev = read_scalar_events(dir_.string());
  ASSERT_EQ(ev.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ev[i].step, i + 1);
    std::vector<std::string> tags;
    for (const auto& [tag, v] : ev[i].values) tags.push_back(tag);
    for (const char* want :
         {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "amp/loss_scale", "amp/skipped",
          "amp/found_inf", "amp/overflows", "memory/parameters_mib", "memory/total_mib"})
      EXPECT_NE(std::find(tags.begin(), tags.end(), want), tags.end()) << want << " at step " << i + 1;
    const bool has_val = std::find(tags.begin(), tags.end(), "val/loss") != tags.end();
    EXPECT_EQ(has_val, i + 1 == 2 || i + 1 == 3) << "step " << i + 1;
  }
  EXPECT_FLOAT_EQ(ev[2].values[0].second, static_cast<float>(s.final_train_loss));
  // A fresh run refuses the directory now that it holds this run's files.
  try {
    train(o);
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.fields(), std::vector<std::string>{"tensorboard_dir"});
  }
}

}  // namespace
}  // namespace mixtrain
