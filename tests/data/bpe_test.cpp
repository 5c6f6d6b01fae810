// BpeTokenizer and train_bpe on small cases worked out by hand (or printed by Hugging Face
// tokenizers' ByteLevel pre-tokenizer, quoted), and their errors. Against tokenizers on the
// whole corpus: bpe_fixture_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "mixtrain/core/error.h"
#include "mixtrain/data/bpe_tokenizer.h"

namespace mixtrain {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : BpeTokenizer::pre_tokenize(text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

std::string write_dir(const std::string& name, const std::string& vocab, const std::string& merges) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/vocab.json") << vocab;
  std::ofstream(dir + "/merges.txt") << merges;
  return dir;
}

TEST(Bpe, ByteMapIsGpt2s) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t c = BpeTokenizer::byte_char(uint8_t(b));
    EXPECT_TRUE(seen.insert(c).second);
    EXPECT_EQ(BpeTokenizer::char_byte(c), b);
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) {
      EXPECT_EQ(c, uint32_t(b));
    }
  }
  EXPECT_EQ(BpeTokenizer::byte_char(0), 0x100u);
  EXPECT_EQ(BpeTokenizer::byte_char('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(BpeTokenizer::byte_char(' '), 0x120u);   // Ġ
  EXPECT_EQ(BpeTokenizer::byte_char(0xAD), 0x143u);  // the last one
  EXPECT_EQ(BpeTokenizer::char_byte(0x144), -1);
  EXPECT_EQ(BpeTokenizer::char_byte('a' + 0x10000), -1);
}

// Each case as tokenizers' ByteLevel(add_prefix_space=False).pre_tokenize_str printed it (mapped
// back to the text's own characters).
TEST(Bpe, PreTokenizerSplitsAsGpt2sPattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm here"), (V{"I", "'m", " here"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a \n\nb"), (V{"a", " \n", "\n", "b"}));
  EXPECT_EQ(pieces("x'sy 've're'LL"), (V{"x", "'s", "y", " '", "ve", "'re", "'", "LL"}));
  EXPECT_EQ(pieces("  lead"), (V{" ", " lead"}));
  EXPECT_EQ(pieces("tail  "), (V{"tail", "  "}));
  EXPECT_EQ(pieces("12ab 3.5!!  ?\t\tz"), (V{"12", "ab", " 3", ".", "5", "!!", " ", " ?", "\t", "\t", "z"}));
  EXPECT_EQ(
      pieces("\xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xD9\xA1\xD9\xA2 \xE2\x80\x83x"),
      (V{"\xC3\xA9t\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", " \xD9\xA1\xD9\xA2", " ", "\xE2\x80\x83", "x"}));
  EXPECT_EQ(pieces(""), V{});
  EXPECT_THROW(BpeTokenizer::pre_tokenize("ok\xC3"), ArgumentError);
}

// The vocabulary: the bytes a b c d and the space, then merged tokens.
BpeTokenizer small() {
  std::vector<std::string> tokens = {"a",
                                     "b",
                                     "c",
                                     "d",
                                     "\xC4\xA0",
                                     "ab",
                                     "bc",
                                     "abc",
                                     "cd",
                                     "\xC4\xA0"
                                     "a"};
  return BpeTokenizer::from_tokens(
      tokens, {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"c", "d"}, {"\xC4\xA0", "a"}}, "small");
}

TEST(Bpe, MergesGoByRankThenLeftmost) {
  const BpeTokenizer t = small();
  // "abcd": (b,c) has rank 0 -> a bc d; then (a,bc) rank 2 -> abc d; (c,d) never forms.
  EXPECT_EQ(t.encode("abcd"), (std::vector<int32_t>{7, 3}));
  // "cdab": (a,b) rank 1 at 2, (c,d) rank 3 at 0: both merge.
  EXPECT_EQ(t.encode("cdab"), (std::vector<int32_t>{8, 5}));
  // "bcbc": equal ranks: left first, both merge.
  EXPECT_EQ(t.encode("bcbc"), (std::vector<int32_t>{6, 6}));
  // " ab": two pre-tokens? No: " ab" is one (` ?\p{L}+`); (Ġ,a) rank 4 loses to (a,b) rank 1.
  EXPECT_EQ(t.encode(" ab"), (std::vector<int32_t>{4, 5}));
  // A byte whose character is not in the vocabulary is dropped (no unknown token), so its
  // neighbours meet and merge, as in tokenizers (BPE::merge_word skips it).
  EXPECT_EQ(t.encode("axb"), (std::vector<int32_t>{5}));
  EXPECT_EQ(t.decode({7, 3, 4, 0}), "abcd a");
  EXPECT_THROW(t.decode({10}), ArgumentError);
  EXPECT_THROW(t.encode("a\xFF"), ArgumentError);
}

TEST(Bpe, FilesRoundTripAndBadFilesAreRefused) {
  const BpeTokenizer t = small();
  const std::string dir = ::testing::TempDir() + "/bpe_small";
  std::filesystem::remove_all(dir);
  t.save(dir);
  const BpeTokenizer back = BpeTokenizer::from_dir(dir);
  EXPECT_EQ(back.fingerprint(), t.fingerprint());
  EXPECT_EQ(back.encode("abcd cdab"), t.encode("abcd cdab"));
  EXPECT_NE(BpeTokenizer::from_tokens({"a", "b", "ab"}, {{"a", "b"}}, "x").fingerprint(),
            BpeTokenizer::from_tokens({"a", "b", "ab"}, {}, "y").fingerprint());

  const auto refused = [](const std::string& vocab, const std::string& merges, const std::string& what) {
    const std::string d = write_dir("bpe_bad", vocab, merges);
    try {
      BpeTokenizer::from_dir(d);
      ADD_FAILURE() << "accepted: " << vocab << " / " << merges;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  refused("[1, 2]", "", "not a JSON object");
  refused("{\"a\": 0, \"b\": 0}", "", "id 0 is given to both");
  refused("{\"a\": 0, \"b\": 2}", "", "outside [0, 2)");
  refused("{\"a\": 0, \"b\": \"1\"}", "", "not an integer");
  refused("{\"a\": 0, \"b\": 1", "", "not valid JSON");
  refused("{\"a\": 0, \"b\": 1}", "#version: 0.2\na b\n", "'ab' is not in the vocabulary");
  refused("{\"a\": 0, \"b\": 1, \"ab\": 2}", "#version: 0.2\na  b\n", ":2: expected two tokens");
  refused("{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b c\n", ":1: expected two tokens");
  refused("{\"a\": 0, \"\": 1}", "", "token 1 is empty");
  EXPECT_THROW(BpeTokenizer::from_dir(::testing::TempDir() + "/no_such_dir"), IoError);
}

TEST(Bpe, TokenizerJsonWithAddedTokens) {
  const std::string dir = ::testing::TempDir() + "/bpe_json";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << R"({"version": "1.0", "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "added_tokens": [{"id": 6, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4, "<": 5},
              "merges": [["a", "b"], "\u0120 ab"]}})";
  const BpeTokenizer t = BpeTokenizer::from_dir(dir);
  EXPECT_EQ(t.vocab_size(), 7);
  EXPECT_EQ(t.encode("ab<|end|> ab<"), (std::vector<int32_t>{2, 6, 4, 5}));
  EXPECT_EQ(t.decode({2, 6, 4}), "ab<|end|> ab");
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  EXPECT_THROW(BpeTokenizer::from_dir(dir), IoError);
}

TEST(Bpe, TrainingMergesTheMostFrequentPairFirst) {
  // Words (pre-tokens with counts): "aaab" x1 ("aaab\n" is "aaab" and "\n"), " ab" x3.
  // Pairs: (a,a) 2, (a,b) 1 + 3 = 4, (Ġ,a) 3. First merge: a b (4). Then: (a,a) 1 + (a,ab) 1,
  // (Ġ,ab) 3: Ġ ab. Then (a,a) = (a,ab) = 1 < min_frequency 2: stop.
  BpeTrainOptions o;
  o.vocab_size = 1000;
  const BpeTokenizer t = train_bpe("aaab\n ab ab ab\n", o, "tiny");
  ASSERT_EQ(t.num_merges(), 2);
  EXPECT_EQ(t.merges()[0], (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(t.merges()[1], (std::pair<std::string, std::string>{"\xC4\xA0", "ab"}));
  EXPECT_EQ(t.vocab_size(), 258);
  EXPECT_EQ(t.token(256), "ab");
  // Ids 0-255: the byte characters in code point order ('a' after the 64 printable characters
  // '!'..'`': 64; Ġ = U+0120 after all 188 printable ones and U+0100..U+011F: 220).
  EXPECT_EQ(t.encode(" ab aaab"), (std::vector<int32_t>{257, 220, 64, 64, 256}));
  EXPECT_EQ(t.encode(" ab").size(), 1u);
  EXPECT_EQ(t.encode("aaab").size(), 3u);  // a a ab
  // min_frequency 1 takes the tie (a,a) = (a,ab) = 1 by the smaller pair: a's id < ab's id, and
  // (a,a) < (a,ab): "aa" first.
  o.min_frequency = 1;
  const BpeTokenizer t1 = train_bpe("aaab\n ab ab ab\n", o, "tiny");
  ASSERT_GE(t1.num_merges(), 3);
  EXPECT_EQ(t1.merges()[2], (std::pair<std::string, std::string>{"a", "a"}));
  // The vocabulary size bounds the merges; the alphabet is always all 256 bytes.
  o.vocab_size = 257;
  EXPECT_EQ(train_bpe("aaab\n ab ab ab\n", o, "tiny").num_merges(), 1);
  o.vocab_size = 255;
  EXPECT_THROW(train_bpe("x", o, "tiny"), ArgumentError);
  o.vocab_size = 300;
  EXPECT_THROW(train_bpe("ok\n\xC3(", o, "bad"), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
