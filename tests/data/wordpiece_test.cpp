// WordPieceTokenizer's edge cases on small vocabularies: cleaning (controls dropped, whitespace
// mapped), accent stripping and lower casing, CJK and punctuation splitting, greedy longest-match
// pieces, [UNK] for unmatched and over-long words, literal special tokens, [CLS]/[SEP] templates,
// single and pair truncation (longest_first), dynamic padding, and every error. (Real text against
// Hugging Face: wordpiece_fixture_test.cpp.)
#include "mixtrain/data/wordpiece.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

// ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the pieces from 5 on.
WordPieceTokenizer small(WordPieceTokenizer::Options o = {}) {
  return WordPieceTokenizer::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]",  "[SEP]", "[MASK]",                        // 0-4
       "un",    "##aff", "##able", "a",     "##a",                           // 5-9
       "naive", "cafe",  "hello",  ",",     "world",  "!",                   // 10-15
       "中",    "文",    "$",      "ab",    "x",      "y", "##b", "Naïve"},  // 16-23
      "small", o);
}

TEST(WordPiece, GreedyLongestMatchWithContinuationPieces) {
  const WordPieceTokenizer t = small();
  EXPECT_EQ(t.tokenize("unaffable"), (Ids{5, 6, 7}));
  EXPECT_EQ(t.tokenize("aaa"), (Ids{8, 9, 9}));
  EXPECT_EQ(t.tokenize("ab"), (Ids{19}));     // the longest piece first, not a + ##b
  EXPECT_EQ(t.tokenize("unaffz"), (Ids{1}));  // one position without a piece: the whole word
  EXPECT_EQ(t.tokenize("hello unaffz world"), (Ids{12, 1, 14}));
  EXPECT_EQ(t.tokenize(""), Ids{});
  EXPECT_EQ(t.tokenize(" \t\n "), Ids{});
}

TEST(WordPiece, WordsPastMaxCharsAreUnknown) {
  const WordPieceTokenizer t = small();
  EXPECT_EQ(t.tokenize(std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(t.tokenize(std::string(101, 'a')), (Ids{1}));
  WordPieceTokenizer::Options o;
  o.max_chars_per_word = 3;
  EXPECT_EQ(small(o).tokenize("aaa aaaa"), (Ids{8, 9, 9, 1}));
  // Characters, not bytes: 100 two-byte characters are not past the limit.
  std::string wide;
  for (int i = 0; i < 100; ++i) wide += "\xC3\xA9";  // é -> e after accent stripping, not in vocab
  EXPECT_EQ(small().basic_tokenize(wide), Words{std::string(100, 'e')});
}

TEST(WordPiece, CleaningAccentsAndCase) {
  const WordPieceTokenizer t = small();
  EXPECT_EQ(t.basic_tokenize("Na\xC3\xAFve  CAF\xC3\x89"), (Words{"naive", "cafe"}));
  EXPECT_EQ(t.tokenize("Na\xC3\xAFve caf\xC3\xA9"), (Ids{10, 11}));
  // NUL, U+FFFD, controls (including VT and FF, which are not \t \n \r), format characters
  // (soft hyphen U+00AD, zero-width space U+200B) and private use (U+E000) are dropped.
  EXPECT_EQ(t.basic_tokenize(std::string("a\0b", 3)), Words{"ab"});
  EXPECT_EQ(t.basic_tokenize("a\x01"
                             "b\x0B"
                             "c\x0C"
                             "d\xC2\xAD"
                             "e\xE2\x80\x8B"
                             "f\xEF\xBF\xBD"
                             "g\xEE\x80\x80"
                             "h"),
            Words{"abcdefgh"});
  // \t \n \r and Unicode spaces (NBSP, ideographic space) separate words.
  EXPECT_EQ(t.basic_tokenize("a\tb\nc\rd\xC2\xA0"
                             "e\xE3\x80\x80"
                             "f"),
            (Words{"a", "b", "c", "d", "e", "f"}));
  // Combining accents written separately are stripped as well.
  EXPECT_EQ(t.basic_tokenize("cafe\xCC\x81"), Words{"cafe"});
  // Without lower casing nothing is stripped or folded.
  WordPieceTokenizer::Options o;
  o.lower_case = false;
  EXPECT_EQ(small(o).tokenize("Na\xC3\xAFve"), (Ids{23}));
  EXPECT_EQ(small(o).basic_tokenize("CAF\xC3\x89"), Words{"CAF\xC3\x89"});
}

TEST(WordPiece, PunctuationAndCjkSplit) {
  const WordPieceTokenizer t = small();
  EXPECT_EQ(t.tokenize("Hello, world!"), (Ids{12, 13, 14, 15}));
  // ASCII symbols that Unicode does not call punctuation split too; Unicode P* (the em dash,
  // guillemets) split; other symbols (the euro sign) do not.
  EXPECT_EQ(t.basic_tokenize("a$b+c<d=e>f^g`h|i~j"), (Words{"a", "$", "b", "+", "c", "<", "d", "=", "e", ">",
                                                            "f", "^", "g", "`", "h", "|", "i", "~", "j"}));
  EXPECT_EQ(t.basic_tokenize("a\xE2\x80\x94"
                             "b\xC2\xAB"
                             "c"),
            (Words{"a", "\xE2\x80\x94", "b", "\xC2\xAB", "c"}));
  EXPECT_EQ(t.basic_tokenize("5\xE2\x82\xAC"), Words{"5\xE2\x82\xAC"});
  EXPECT_EQ(t.basic_tokenize("x\xE4\xB8\xAD\xE6\x96\x87y"),
            (Words{"x", "\xE4\xB8\xAD", "\xE6\x96\x87", "y"}));
  EXPECT_EQ(t.tokenize("\xE4\xB8\xAD\xE6\x96\x87"), (Ids{16, 17}));
  // Hiragana is not in the CJK ideograph blocks: it stays in its word.
  EXPECT_EQ(t.basic_tokenize("x\xE3\x81\x82y"), Words{"x\xE3\x81\x82y"});
}

TEST(WordPiece, LiteralSpecialTokensKeepTheirIds) {
  const WordPieceTokenizer t = small();
  EXPECT_EQ(t.tokenize("x[SEP]y"), (Ids{20, 3, 21}));
  EXPECT_EQ(t.tokenize("[MASK] [CLS][PAD]"), (Ids{4, 2, 0}));
  // Matched before normalization, so only the exact spelling counts.
  EXPECT_EQ(t.basic_tokenize("[sep]"), (Words{"[", "sep", "]"}));
  EXPECT_EQ(t.basic_tokenize("[SEP"), (Words{"[", "sep"}));
}

TEST(WordPiece, EncodeAndTruncateSingle) {
  const WordPieceTokenizer t = small();
  Encoding e = t.encode("hello world");
  EXPECT_EQ(e.ids, (Ids{2, 12, 14, 3}));
  EXPECT_EQ(e.type_ids, (Ids{0, 0, 0, 0}));
  EXPECT_EQ(t.encode("").ids, (Ids{2, 3}));
  EXPECT_EQ(t.encode("hello world !", 4).ids, (Ids{2, 12, 14, 3}));
  EXPECT_EQ(t.encode("hello world !", 3).ids, (Ids{2, 12, 3}));
  EXPECT_EQ(t.encode("hello world !", 2).ids, (Ids{2, 3}));
  EXPECT_EQ(t.encode("hello", 100).ids, (Ids{2, 12, 3}));
  EXPECT_THROW(t.encode("hello", 1), ArgumentError);
  EXPECT_THROW(t.encode("hello", -5), ArgumentError);
}

TEST(WordPiece, EncodePairWithLongestFirstTruncation) {
  const WordPieceTokenizer t = small();
  const Encoding e = t.encode_pair("hello", "world !");
  EXPECT_EQ(e.ids, (Ids{2, 12, 3, 14, 15, 3}));
  EXPECT_EQ(e.type_ids, (Ids{0, 0, 0, 1, 1, 1}));
  const std::string ten = "a a a a a a a a a a", two = "x y", three = "x y x";
  const auto lengths = [&](const std::string& a, const std::string& b, int64_t max_len) {
    const Encoding p = t.encode_pair(a, b, max_len);
    int64_t na = 0, nb = 0;
    for (size_t i = 0; i < p.ids.size(); ++i) {
      if (p.ids[i] == 2 || p.ids[i] == 3) continue;
      (p.type_ids[i] ? nb : na) += 1;
    }
    return std::pair<int64_t, int64_t>{na, nb};
  };
  // Room for 7: the shorter (2) stays, the longer gets the rest.
  EXPECT_EQ(lengths(ten, two, 10), (std::pair<int64_t, int64_t>{5, 2}));
  EXPECT_EQ(lengths(two, ten, 10), (std::pair<int64_t, int64_t>{2, 5}));
  // Room for 6 with 10 and 10: both cut to half; room 7: the first gets 3, the second 4.
  EXPECT_EQ(lengths(ten, ten, 9), (std::pair<int64_t, int64_t>{3, 3}));
  EXPECT_EQ(lengths(ten, ten, 10), (std::pair<int64_t, int64_t>{3, 4}));
  // Room 3 with 3 and 10: the shorter would leave the longer less than itself: 1 and 2.
  EXPECT_EQ(lengths(three, ten, 6), (std::pair<int64_t, int64_t>{1, 2}));
  EXPECT_EQ(lengths(ten, three, 6), (std::pair<int64_t, int64_t>{2, 1}));
  EXPECT_EQ(lengths(two, three, 100), (std::pair<int64_t, int64_t>{2, 3}));
  EXPECT_EQ(t.encode_pair("hello", "world", 3).ids, (Ids{2, 3, 3}));
  EXPECT_THROW(t.encode_pair("a", "b", 2), ArgumentError);
}

TEST(WordPiece, DynamicPaddingToTheLongest) {
  const WordPieceTokenizer t = small();
  const EncodedBatch b = t.pad({t.encode("hello"), t.encode_pair("hello", "world !"), t.encode("")});
  EXPECT_EQ(b.B, 3);
  EXPECT_EQ(b.T, 6);
  EXPECT_EQ(b.input_ids, (Ids{2, 12, 3, 0, 0, 0, /**/ 2, 12, 3, 14, 15, 3, /**/ 2, 3, 0, 0, 0, 0}));
  EXPECT_EQ(b.token_type_ids, (Ids{0, 0, 0, 0, 0, 0, /**/ 0, 0, 0, 1, 1, 1, /**/ 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(b.attention_mask, (Ids{1, 1, 1, 0, 0, 0, /**/ 1, 1, 1, 1, 1, 1, /**/ 1, 1, 0, 0, 0, 0}));
  EXPECT_THROW(t.pad({}), ArgumentError);
  Encoding bad = t.encode("hello");
  bad.type_ids.pop_back();
  EXPECT_THROW(t.pad({bad}), ArgumentError);
}

TEST(WordPiece, InvalidUtf8IsAnErrorNamingTheByte) {
  const WordPieceTokenizer t = small();
  for (const std::string& s : {std::string("ok \xFF"), std::string("ok \xC3"), std::string("ok \xED\xA0\x80"),
                               std::string("ok \xC0\xAF")}) {
    try {
      t.tokenize(s);
      ADD_FAILURE() << "no error";
    } catch (const ArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 3"), std::string::npos) << e.what();
    }
  }
  // The offset counts from the start of the text, past special tokens.
  try {
    t.tokenize("[SEP]x\xFF");
    ADD_FAILURE() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("at byte 6"), std::string::npos) << e.what();
  }
}

class VocabFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mixtrain_vocab_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& bytes) {
    const std::string p = (dir_ / "vocab.txt").string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  static std::string message(const std::string& path) {
    try {
      WordPieceTokenizer::from_vocab_file(path);
    } catch (const IoError& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir_;
};

TEST_F(VocabFile, IdsAreLineNumbersAndTrailingSpaceIsIgnored) {
  const WordPieceTokenizer t =
      WordPieceTokenizer::from_vocab_file(write("[PAD]\r\n[UNK] \n[CLS]\n[SEP]\nhello\t\n"));
  EXPECT_EQ(t.vocab_size(), 5);
  EXPECT_EQ(t.id("hello"), 4);
  EXPECT_EQ(t.id("[MASK]"), -1);
  EXPECT_EQ(t.token(4), "hello");
  EXPECT_THROW(t.token(5), ArgumentError);
  EXPECT_THROW(t.token(-1), ArgumentError);
  EXPECT_EQ(t.encode("hello [MASK]").ids, (Ids{2, 4, 1, 1, 1, 3}));  // no [MASK] token here
}

TEST_F(VocabFile, BadFilesAreOneLineErrors) {
  EXPECT_NE(message((dir_ / "missing.txt").string()).find("cannot be read"), std::string::npos);
  EXPECT_NE(message(write("")).find("empty"), std::string::npos);
  EXPECT_NE(
      message(write("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\na\n")).find(":6: duplicate token 'a' (first on line 5)"),
      std::string::npos);
  EXPECT_NE(message(write("[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n")).find(":3: empty token"), std::string::npos);
  EXPECT_NE(message(write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n\xFF\n")).find(":5: token is not valid UTF-8"),
            std::string::npos);
  EXPECT_NE(message(write("[PAD]\n[CLS]\n[SEP]\n")).find("no [UNK] token"), std::string::npos);
  WordPieceTokenizer::Options o;
  o.max_chars_per_word = 0;
  EXPECT_THROW(WordPieceTokenizer::from_vocab_file(write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n"), o), ArgumentError);
}

}  // namespace
}  // namespace mixtrain
