// Token files (data/token_file.h): what is written is what TextCorpus maps back, the split is the
// byte corpus's moved to a character start, ids take 2 or 4 bytes by vocabulary size, and a
// damaged, truncated or foreign file is refused with a one-line IoError.
#include "mixtrain/data/token_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "mixtrain/core/error.h"
#include "mixtrain/data/text_corpus.h"

namespace mixtrain {
namespace {

// The 256 byte characters plus `extra` tokens "<k>" (never formed by a merge) and the merges
// "Ġ t" -> "Ġt", "h e" -> "he".
BpeTokenizer tokenizer(int extra) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    const uint32_t c = BpeTokenizer::byte_char(uint8_t(b));
    std::string s;
    if (c < 0x80) {
      s = char(c);
    } else {
      s = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
    }
    tokens.push_back(s);
  }
  tokens.push_back("\xC4\xA0t");
  tokens.push_back("he");
  for (int k = 0; k < extra; ++k) tokens.push_back("<" + std::to_string(k) + ">");
  return BpeTokenizer::from_tokens(tokens, {{"\xC4\xA0", "t"}, {"h", "e"}}, "test");
}

std::string text() {
  std::string t;
  for (int i = 0; i < 300; ++i) t += "the theme \xC3\xA9t\xC3\xA9 " + std::to_string(i) + "\n";
  return t;
}

TEST(TokenFile, MapsBackWhatWasWritten) {
  const std::string path = ::testing::TempDir() + "/t.tokens";
  const BpeTokenizer tok = tokenizer(0);
  const std::string t = text();
  const TokenFileInfo info = write_token_file(path, tok, t, "text");
  EXPECT_EQ(info.width, 2u);
  EXPECT_EQ(info.vocab_size, 258);
  EXPECT_EQ(info.train_text_bytes + info.val_text_bytes, int64_t(t.size()));
  // The byte corpus's split (the last 10%), moved back to a character start.
  const int64_t cut = int64_t(t.size()) - std::llround(double(t.size()) * 0.1);
  EXPECT_LE(info.train_text_bytes, cut);
  EXPECT_GT(info.train_text_bytes, cut - 4);
  EXPECT_NE(uint8_t(t[size_t(info.train_text_bytes)]) & 0xC0, 0x80);
  const std::vector<int32_t> train = tok.encode(std::string_view(t).substr(0, size_t(info.train_text_bytes)));
  const std::vector<int32_t> val = tok.encode(std::string_view(t).substr(size_t(info.train_text_bytes)));
  const TextCorpus c = TextCorpus::from_token_file(path);
  ASSERT_EQ(c.train_size(), int64_t(train.size()));
  ASSERT_EQ(c.val_size(), int64_t(val.size()));
  EXPECT_EQ(c.vocab_size(), 258);
  EXPECT_EQ(c.val_text_bytes(), info.val_text_bytes);
  EXPECT_EQ(c.tokenizer(), tok.fingerprint());
  EXPECT_EQ(c.train_bytes(), nullptr);
  for (size_t k = 0; k < train.size(); ++k) ASSERT_EQ(c.token(int64_t(k)), train[k]);
  for (size_t k = 0; k < val.size(); ++k) ASSERT_EQ(c.token(c.train_size() + int64_t(k)), val[k]);
  EXPECT_EQ(read_token_file_info(path).source_crc32, text_crc32(t));
  // Batches read ids: the validation windows start at the validation part.
  Tensor x, y;
  c.val_batch(0, 1, 8, x, y);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(x.data<int32_t>()[i], val[size_t(i)]);
    EXPECT_EQ(y.data<int32_t>()[i], val[size_t(i + 1)]);
  }
}

TEST(TokenFile, LargeVocabulariesTakeFourBytes) {
  const std::string path = ::testing::TempDir() + "/wide.tokens";
  const BpeTokenizer tok = tokenizer(65536 - 258 + 1);
  ASSERT_EQ(tok.vocab_size(), 65537);
  EXPECT_EQ(write_token_file(path, tok, text(), "text").width, 4u);
  const TextCorpus c = TextCorpus::from_token_file(path);
  EXPECT_EQ(c.width(), 4);
  EXPECT_EQ(c.token(0), tok.encode("the")[0]);
}

TEST(TokenFile, BadFilesAreRefused) {
  const std::string path = ::testing::TempDir() + "/good.tokens";
  write_token_file(path, tokenizer(0), text(), "text");
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  const auto refused = [&](const std::string& content, const std::string& what) {
    const std::string p = ::testing::TempDir() + "/bad.tokens";
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    try {
      (void)TextCorpus::from_token_file(p);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  refused(
      "not a token file at all, but long enough to hold a header of 128 bytes......................"
      "..............................................",
      "not a mixtrain token file");
  refused(bytes.substr(0, 100), "shorter than its header");
  refused(bytes.substr(0, bytes.size() - 2), "a truncated or foreign file");
  std::string damaged = bytes;
  damaged[200] = char(damaged[200] ^ 1);
  refused(damaged, "the ids' checksum does not match");
  std::string header = bytes;
  header[16] = char(header[16] ^ 1);  // vocab_size
  refused(header, "the header's checksum does not match");
  EXPECT_THROW(TextCorpus::from_token_file(::testing::TempDir() + "/none.tokens"), IoError);
  EXPECT_THROW(write_token_file(::testing::TempDir() + "/no/dir/x.tokens", tokenizer(0), text(), "text"),
               IoError);
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "/no/dir"));
  EXPECT_THROW(write_token_file(path, tokenizer(0), "ok \xC3(", "text"), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
