// mixtrain's byte-level BPE against Hugging Face `tokenizers` (tests/fixtures/bpe/, written by
// tools/make_bpe_fixture.py with ByteLevelBPETokenizer): train_bpe on the built-in corpus gives
// the vocabulary and merges tokenizers' trainer gave, token for token and merge for merge; the
// ids of every corpus line, and of multi-line pieces, are tokenizers'; every Unicode code point
// falls in the pre-tokenizer class tokenizers' regex gives it; decoding inverts encoding. Each
// text's CRC-32 is checked first, so a changed corpus fails as such rather than as a tokenizer
// difference. Needs the built-in corpus (scripts/setup.sh).
#include <gtest/gtest.h>
#include <unicode/utf8.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "fixtures/xz.h"
#include "mixtrain/data/bpe_tokenizer.h"
#include "mixtrain/data/text_corpus.h"

namespace mixtrain {
namespace {

const std::string kDir = std::string(MIXTRAIN_SOURCE_DIR) + "/tests/fixtures/bpe";

struct Row {
  std::string key;  // CRC-32 hex, or "FIRST LAST" for classes
  std::vector<std::string> values;
};

const std::map<std::string, std::vector<Row>>& fixture() {
  static const std::map<std::string, std::vector<Row>> sections = [] {
    std::map<std::string, std::vector<Row>> m;
    std::istringstream in(xz_decompress(kDir + "/ids.txt.xz"));
    std::string line;
    std::getline(in, line);
    if (line != "mixtrain-bpe-fixture 1") throw std::runtime_error("bpe fixture: bad first line");
    std::vector<Row>* cur = nullptr;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      if (line.rfind("section ", 0) == 0) {
        std::string word, name;
        ls >> word >> name;
        cur = &m[name];
        continue;
      }
      if (!cur) throw std::runtime_error("bpe fixture: a row before any section");
      Row r;
      ls >> r.key;
      if (cur == &m["classes"]) {
        std::string last;
        ls >> last;
        r.key += " " + last;
      }
      for (std::string v; ls >> v;) r.values.push_back(v);
      cur->push_back(std::move(r));
    }
    return m;
  }();
  return sections;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return std::move(s).str();
}

const std::string& corpus() {
  static const std::string text = read_file(TextCorpus::default_corpus_path());
  return text;
}

std::string crc_hex(std::string_view s) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc32(s.data(), s.size()));
  return buf;
}

void expect_ids(const BpeTokenizer& bpe, const std::vector<std::string_view>& texts,
                const std::vector<Row>& rows, const char* section) {
  ASSERT_EQ(texts.size(), rows.size()) << section << ": the corpus changed since the fixture was made";
  int64_t mismatches = 0, tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(crc_hex(texts[i]), rows[i].key)
        << section << " " << i << ": the text changed since the fixture";
    const std::vector<int32_t> ids = bpe.encode(texts[i]);
    std::vector<std::string> got;
    for (const int32_t id : ids) got.push_back(std::to_string(id));
    tokens += int64_t(ids.size());
    if (got != rows[i].values && ++mismatches <= 5)
      ADD_FAILURE() << section << " " << i << ": ids differ from tokenizers' for '" << texts[i] << "'";
    if (bpe.decode(ids) != texts[i] && ++mismatches <= 5)
      ADD_FAILURE() << section << " " << i << ": decode(encode(text)) != text";
  }
  EXPECT_EQ(mismatches, 0) << section;
  EXPECT_GT(tokens, int64_t(texts.size()));  // not a fixture of empty lines
}

TEST(BpeFixture, TrainingGivesTokenizersVocabularyAndMerges) {
  const BpeTokenizer hf = BpeTokenizer::from_files(kDir + "/vocab.json", kDir + "/merges.txt");
  BpeTrainOptions o;
  o.vocab_size = hf.vocab_size();
  o.min_frequency = 2;
  const BpeTokenizer ours = train_bpe(corpus(), o, "fortunes.txt");
  ASSERT_EQ(ours.vocab_size(), hf.vocab_size());
  for (int32_t i = 0; i < int32_t(hf.vocab_size()); ++i)
    ASSERT_EQ(ours.token(i), hf.token(i)) << "token " << i;
  ASSERT_EQ(ours.num_merges(), hf.num_merges());
  for (size_t r = 0; r < hf.merges().size(); ++r)
    ASSERT_EQ(ours.merges()[r], hf.merges()[r]) << "merge " << r;
  EXPECT_EQ(ours.fingerprint(), hf.fingerprint());
  // And the files it writes read back as the same tokenizer, byte for byte what tokenizers wrote.
  const std::string dir = ::testing::TempDir() + "/bpe_fixture_trained";
  ours.save(dir);
  EXPECT_EQ(read_file(dir + "/vocab.json"), read_file(kDir + "/vocab.json"));
  EXPECT_EQ(read_file(dir + "/merges.txt"), read_file(kDir + "/merges.txt"));
}

TEST(BpeFixture, EveryCorpusLineEncodesAsTokenizersDoes) {
  const BpeTokenizer bpe = BpeTokenizer::from_files(kDir + "/vocab.json", kDir + "/merges.txt");
  const std::string& text = corpus();
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.emplace_back(text.data() + pos, end - pos);
    pos = end + 1;
  }
  expect_ids(bpe, lines, fixture().at("lines"), "lines");
}

TEST(BpeFixture, MultiLinePiecesEncodeAsTokenizersDoes) {
  const BpeTokenizer bpe = BpeTokenizer::from_files(kDir + "/vocab.json", kDir + "/merges.txt");
  const std::string& text = corpus();
  std::vector<std::string_view> blocks;
  size_t start = 0, k = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    pos = end;
    if (pos - start >= 4000 || pos == text.size()) {
      if (k++ % 10 == 0) blocks.emplace_back(text.data() + start, pos - start);
      start = pos;
    }
  }
  expect_ids(bpe, blocks, fixture().at("blocks"), "blocks");
}

TEST(BpeFixture, EveryCodePointHasTokenizersClass) {
  // The class from the pre-tokenizer itself, probed as the fixture script does.
  const auto joins = [](const char* prefix, UChar32 c) {
    std::string s = prefix;
    char buf[U8_MAX_LENGTH];
    int32_t n = 0;
    U8_APPEND_UNSAFE(buf, n, c);
    s.append(buf, size_t(n));
    return BpeTokenizer::pre_tokenize(s).size() == 1;
  };
  int64_t checked = 0, wrong = 0;
  for (const Row& r : fixture().at("classes")) {
    const UChar32 first = UChar32(std::stoul(r.key.substr(0, r.key.find(' ')), nullptr, 16));
    const UChar32 last = UChar32(std::stoul(r.key.substr(r.key.find(' ') + 1), nullptr, 16));
    ASSERT_EQ(r.values.size(), 1u);
    for (UChar32 c = first; c <= last; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      std::string k;
      for (const auto& [name, prefix] : {std::pair{"L", "a"}, {"N", "1"}, {"S", "\t"}, {"O", "!"}})
        if (joins(prefix, c)) k += name;
      ++checked;
      if (k != r.values[0] && ++wrong <= 10)
        ADD_FAILURE() << "U+" << std::hex << c << ": class " << k << ", tokenizers says " << r.values[0];
    }
  }
  EXPECT_EQ(checked, 0x110000 - 0x800);
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace mixtrain
