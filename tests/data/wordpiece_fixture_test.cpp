// mixtrain's WordPiece tokenizer against Hugging Face's, id for id: every Fine Foods review (train
// and test), every entry of the fortunes topic task, review pairs truncated with longest_first,
// single reviews truncated, and every Unicode code point between two x's. The expected ids come
// from tests/fixtures/wordpiece_ids.txt.xz (tools/make_wordpiece_fixture.py, transformers'
// AutoTokenizer on the MiniLM folder); each text's CRC-32 is checked first, so a changed data
// set fails as such rather than as a tokenizer difference. Needs the built-in data
// (scripts/setup.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "fixtures/xz.h"
#include "mixtrain/data/builtin_data.h"
#include "mixtrain/data/text_classification.h"
#include "mixtrain/data/wordpiece.h"

namespace mixtrain {
namespace {

struct FixtureRow {
  std::string key;  // CRC-32 hex, or "FIRST LAST" for code points
  std::vector<int32_t> ids;
};
struct Section {
  int64_t max_len = 0;
  std::vector<FixtureRow> rows;
};

// Sections by "name" or "name max_len".
const std::map<std::string, Section>& fixture() {
  static const std::map<std::string, Section> sections = [] {
    std::map<std::string, Section> m;
    std::istringstream in(
        xz_decompress(std::string(MIXTRAIN_SOURCE_DIR) + "/tests/fixtures/wordpiece_ids.txt.xz"));
    std::string line;
    std::getline(in, line);
    if (line != "mixtrain-wordpiece-fixture 1") throw std::runtime_error("wordpiece fixture: bad first line");
    Section* cur = nullptr;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      if (line.rfind("section ", 0) == 0) {
        std::string word, name;
        int64_t count = 0, max_len = 0;
        ls >> word >> name >> count;
        if (!(ls >> max_len)) max_len = 0;
        const std::string key = max_len ? name + " " + std::to_string(max_len) : name;
        cur = &m[key];
        cur->max_len = max_len;
        cur->rows.reserve(size_t(count));
        continue;
      }
      if (!cur) throw std::runtime_error("wordpiece fixture: a row before the first section");
      FixtureRow r;
      const bool codepoints = &m["codepoints"] == cur;
      std::string a, b;
      ls >> a;
      if (codepoints) {
        ls >> b;
        r.key = a + " " + b;
      } else {
        r.key = a;
      }
      int32_t id;
      while (ls >> id) r.ids.push_back(id);
      cur->rows.push_back(std::move(r));
    }
    return m;
  }();
  return sections;
}

const WordPieceTokenizer& tok() {
  static const WordPieceTokenizer t = WordPieceTokenizer::from_vocab_file(
      builtin_data_path(std::string(kDefaultEncoderModel) + "/vocab.txt"));
  return t;
}

std::string crc_hex(const std::string& s) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc32(s.data(), s.size()));
  return buf;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) {
    if (i > 0) s += ' ';
    s += std::to_string(ids[i]);
  }
  return ids.size() > 40 ? s + " ..." : s;
}

// Compares encode() of every text with its fixture row; reports the first few differences.
void check_texts(const std::string& section, const std::vector<std::string>& texts) {
  ASSERT_TRUE(fixture().count(section)) << "fixture has no section " << section;
  const Section& s = fixture().at(section);
  ASSERT_EQ(s.rows.size(), texts.size()) << section;
  int64_t wrong = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(crc_hex(texts[i]), s.rows[i].key)
        << section << " text " << i << " is not the text the fixture was made from";
    const std::vector<int32_t> got = tok().encode(texts[i], s.max_len).ids;
    if (got != s.rows[i].ids && ++wrong <= 5)
      ADD_FAILURE() << section << " text " << i << " (" << texts[i].substr(0, 80)
                    << "...):\n  mixtrain: " << ids_str(got) << "\n  HF:       " << ids_str(s.rows[i].ids);
  }
  EXPECT_EQ(wrong, 0) << "of " << texts.size() << " texts in " << section;
}

std::vector<std::string> texts_of(const TextClassificationData& d) {
  std::vector<std::string> t;
  for (const TextExample& e : d.examples) t.push_back(e.text);
  return t;
}

TEST(WordPieceFixture, EveryFineFoodsReview) {
  const TextClassificationTask task = finefoods_task();
  ASSERT_EQ(task.train.examples.size(), 4000u);
  ASSERT_EQ(task.test.examples.size(), 1000u);
  check_texts("finefoods/train.tsv", texts_of(task.train));
  check_texts("finefoods/test.tsv", texts_of(task.test));
}

TEST(WordPieceFixture, EveryFortunesEntry) {
  const TextClassificationData all = fortunes_topic_entries();
  ASSERT_EQ(all.examples.size(), 3929u);
  check_texts("fortunes", texts_of(all));
}

TEST(WordPieceFixture, TruncatedReviews) {
  const std::vector<std::string> test = texts_of(finefoods_task().test);
  check_texts("truncate 128", std::vector<std::string>(test.begin(), test.begin() + 200));
}

TEST(WordPieceFixture, ReviewPairsTruncatedLongestFirst) {
  const std::vector<std::string> test = texts_of(finefoods_task().test);
  const Section& s = fixture().at("pairs 64");
  ASSERT_EQ(s.rows.size(), test.size() - 1);
  int64_t wrong = 0;
  for (size_t i = 0; i + 1 < test.size(); ++i) {
    ASSERT_EQ(crc_hex(test[i] + "\t" + test[i + 1]), s.rows[i].key) << "pair " << i;
    const Encoding e = tok().encode_pair(test[i], test[i + 1], 64);
    ASSERT_EQ(e.ids.size(), e.type_ids.size());
    if (e.ids != s.rows[i].ids && ++wrong <= 5)
      ADD_FAILURE() << "pair " << i << ":\n  mixtrain: " << ids_str(e.ids)
                    << "\n  HF:       " << ids_str(s.rows[i].ids);
  }
  EXPECT_EQ(wrong, 0) << "of " << test.size() - 1 << " pairs";
}

std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F)),
        s += char(0x80 | (c & 0x3F));
  }
  return s;
}

TEST(WordPieceFixture, EveryCodePointBetweenTwoXs) {
  const Section& s = fixture().at("codepoints");
  uint32_t expect_next = 0;
  int64_t wrong = 0, checked = 0;
  for (const FixtureRow& r : s.rows) {
    uint32_t first = 0, last = 0;
    ASSERT_EQ(std::sscanf(r.key.c_str(), "%x %x", &first, &last), 2);
    ASSERT_EQ(first, expect_next == 0xD800 ? 0xE000u : expect_next) << "code point ranges must be contiguous";
    for (uint32_t c = first; c <= last; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      ++checked;
      std::string text = "x";  // (built with += : GCC 12 warns falsely on "x" + s + "x")
      text += utf8(c);
      text += 'x';
      const std::vector<int32_t> got = tok().tokenize(text);
      if (got != r.ids && ++wrong <= 10) {
        char cp[16];
        std::snprintf(cp, sizeof cp, "U+%04X", c);
        ADD_FAILURE() << cp << ": mixtrain " << ids_str(got) << ", HF " << ids_str(r.ids);
      }
    }
    expect_next = last + 1;
  }
  EXPECT_EQ(expect_next, 0x110000u);
  EXPECT_EQ(checked, 0x110000 - 0x800);
  EXPECT_EQ(wrong, 0) << "code points differ";
}

}  // namespace
}  // namespace mixtrain
