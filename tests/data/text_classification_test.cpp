// The classification readers (TSV, CSV with RFC 4180 quoting, JSONL) on small texts: columns by
// name, an optional pair column, label ids (sorted names, or a given list), line numbers of rows
// (also after multi-line CSV fields), and every bad-row error with its file and line; then the
// built-in tasks: the Fine Foods reviews and the fortunes topic split.
#include "mixtrain/data/text_classification.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/data/builtin_data.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

TextColumns cols(std::string text = "text", std::string label = "label", std::string pair = "") {
  TextColumns c;
  c.text = std::move(text);
  c.label = std::move(label);
  c.text_pair = std::move(pair);
  return c;
}

// The message of the IoError parsing throws ("no error" if none).
std::string error_of(const std::string& content, TextFormat f, const TextColumns& c = cols(),
                     const std::vector<std::string>* labels = nullptr) {
  try {
    TextClassificationData::parse(content, f, "d", c, labels);
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TextClassification, TsvColumnsByNameAndSortedLabels) {
  const TextClassificationData d = TextClassificationData::parse(
      "id\tlabel\ttext\r\n1\tpos\tgood stuff\r\n\n2\tneg\tbad \"stuff\"\n3\tpos\t\n", TextFormat::tsv,
      "d.tsv", cols());
  ASSERT_EQ(d.examples.size(), 3u);
  EXPECT_EQ(d.labels, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_EQ(d.examples[0].text, "good stuff");
  EXPECT_EQ(d.examples[0].label, 1);
  EXPECT_EQ(d.examples[0].line, 2);
  EXPECT_EQ(d.examples[1].text, "bad \"stuff\"");  // no quoting in TSV
  EXPECT_EQ(d.examples[1].label, 0);
  EXPECT_EQ(d.examples[1].line, 4);
  EXPECT_EQ(d.examples[2].text, "");
  EXPECT_EQ(d.class_counts(), (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(d.majority_baseline(), 2.0 / 3.0);
}

TEST(TextClassification, TsvBadRows) {
  EXPECT_EQ(error_of("text\tlabel\na\tb\tc\n", TextFormat::tsv),
            "d:2: expected 2 fields (as the header), got 3");
  EXPECT_EQ(error_of("text\tlabel\na\tx\nb\n", TextFormat::tsv),
            "d:3: expected 2 fields (as the header), got 1");
  EXPECT_EQ(error_of("txt\tlabel\n", TextFormat::tsv),
            "d:1: no text column 'text' (the header has 'txt', 'label')");
  EXPECT_EQ(error_of("text\tlabel\ttext\n", TextFormat::tsv),
            "d:1: column 'text' appears twice in the header");
  EXPECT_EQ(error_of("text\tlabel\na\t\n", TextFormat::tsv), "d:2: empty label");
  EXPECT_EQ(error_of("text\tlabel\na\xFF\tx\n", TextFormat::tsv), "d:2: column 'text' is not valid UTF-8");
  EXPECT_EQ(error_of("", TextFormat::tsv), "data file 'd': no header line (the file is empty)");
  EXPECT_EQ(error_of("text\tlabel\n", TextFormat::tsv), "no error");  // a header alone: no examples
}

TEST(TextClassification, CsvQuotingPerRfc4180) {
  const std::string csv =
      "text,label,extra\r\n"
      "\"one, with comma\",a,1\r\n"
      "\"two\nlines \"\"quoted\"\"\",b,2\r\n"
      "plain,a,\r\n"
      "\"\",b,\"\"\n";
  const TextClassificationData d = TextClassificationData::parse(csv, TextFormat::csv, "d.csv", cols());
  ASSERT_EQ(d.examples.size(), 4u);
  EXPECT_EQ(d.examples[0].text, "one, with comma");
  EXPECT_EQ(d.examples[1].text, "two\nlines \"quoted\"");
  EXPECT_EQ(d.examples[1].line, 3);
  EXPECT_EQ(d.examples[2].text, "plain");
  EXPECT_EQ(d.examples[2].line, 5);  // after the two-line record
  EXPECT_EQ(d.examples[3].text, "");
  EXPECT_EQ(d.examples[3].label, 1);
  // No final line break.
  EXPECT_EQ(TextClassificationData::parse("text,label\nx,y", TextFormat::csv, "d", cols()).examples.size(),
            1u);
}

TEST(TextClassification, CsvBadRows) {
  EXPECT_EQ(error_of("text,label\n\"open,a\nb,c\n", TextFormat::csv),
            "d:2: a quoted field is not closed before the end of the file");
  EXPECT_EQ(error_of("text,label\n\"x\"y,a\n", TextFormat::csv),
            "d:2: text after the closing quote of a field (RFC 4180: a quote in a field is \"\")");
  EXPECT_EQ(error_of("text,label\nx\"y,a\n", TextFormat::csv),
            "d:2: a quote inside an unquoted field (quote the field, \"\" for a quote)");
  EXPECT_EQ(error_of("text,label\n\"a\nb\",x\nc\n", TextFormat::csv),
            "d:4: expected 2 fields (as the header), got 1");
}

TEST(TextClassification, JsonlWithPairsAndIntegerLabels) {
  const std::string jsonl =
      "{\"premise\": \"A man.\", \"hypothesis\": \"A person.\", \"y\": 1}\n"
      "\n"
      "{\"premise\": \"caf\\u00e9\", \"hypothesis\": \"x\", \"y\": 0, \"other\": [1]}\n";
  const TextClassificationData d =
      TextClassificationData::parse(jsonl, TextFormat::jsonl, "d.jsonl", cols("premise", "y", "hypothesis"));
  ASSERT_EQ(d.examples.size(), 2u);
  EXPECT_EQ(d.labels, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(d.examples[0].text_pair, "A person.");
  EXPECT_EQ(d.examples[0].label, 1);
  EXPECT_EQ(d.examples[1].text, "caf\xC3\xA9");
  EXPECT_EQ(d.examples[1].line, 3);
}

// A repeated key would be collapsed to its last value by a plain parser: which text was meant?
TEST(TextClassification, JsonlDuplicateKeyRefused) {
  EXPECT_EQ(
      error_of("{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"a\", \"label\": \"x\", \"text\": \"b\"}\n",
               TextFormat::jsonl),
      "d:2: duplicate key 'text'");
}

TEST(TextClassification, JsonlBadRows) {
  EXPECT_EQ(error_of("{\"text\": \"a\", \"label\": \"x\"}\n[1]\n", TextFormat::jsonl),
            "d:2: not a JSON object");
  EXPECT_NE(error_of("{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \n", TextFormat::jsonl)
                .find("d:2: not valid JSON"),
            std::string::npos);
  EXPECT_EQ(error_of("{\"label\": \"x\"}\n", TextFormat::jsonl), "d:1: no text field 'text'");
  EXPECT_EQ(error_of("{\"text\": \"a\", \"label\": \"x\", \"deep\": " + std::string(100000, '[') +
                         std::string(100000, ']') + "}\n",
                     TextFormat::jsonl),
            "d:1: JSON nested deeper than 64 levels");
  EXPECT_EQ(error_of("{\"text\": 3, \"label\": \"x\"}\n", TextFormat::jsonl),
            "d:1: text field 'text' is not a string");
  EXPECT_EQ(error_of("{\"text\": \"a\"}\n", TextFormat::jsonl), "d:1: no label field 'label'");
  EXPECT_EQ(error_of("{\"text\": \"a\", \"label\": 0.5}\n", TextFormat::jsonl),
            "d:1: label field 'label' is neither a string nor an integer");
  EXPECT_EQ(error_of("{\"text\": \"a\", \"label\": \"x\"}\n", TextFormat::jsonl, cols("text", "label", "b")),
            "d:1: no text pair field 'b'");
}

TEST(TextClassification, GivenLabelListKeepsIdsAndRejectsUnknownLabels) {
  const std::vector<std::string> labels = {"pos", "neg"};
  const TextClassificationData d =
      TextClassificationData::parse("text\tlabel\na\tneg\n", TextFormat::tsv, "t", cols(), &labels);
  EXPECT_EQ(d.labels, labels);
  EXPECT_EQ(d.examples[0].label, 1);
  EXPECT_EQ(error_of("text\tlabel\na\tneg\nb\tmeh\n", TextFormat::tsv, cols(), &labels),
            "d:3: label 'meh' is not one of the known labels ('pos', 'neg')");
  const std::vector<std::string> twice = {"a", "a"};
  EXPECT_THROW(TextClassificationData::parse("text\tlabel\n", TextFormat::tsv, "t", cols(), &twice),
               ArgumentError);
}

TEST(TextClassification, LoadChoosesTheFormatByExtension) {
  const fs::path dir = fs::temp_directory_path() / ("mixtrain_textcls_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.csv") << "text,label\n\"x, y\",1\n";
  std::ofstream(dir / "a.txt") << "text,label\n";
  const TextClassificationData d = TextClassificationData::load((dir / "a.csv").string(), cols());
  EXPECT_EQ(d.examples.at(0).text, "x, y");
  EXPECT_EQ(d.path, (dir / "a.csv").string());
  EXPECT_THROW(TextClassificationData::load((dir / "a.txt").string(), cols()), ArgumentError);
  EXPECT_THROW(TextClassificationData::load((dir / "none.tsv").string(), cols()), IoError);
  EXPECT_THROW(TextClassificationData::load(dir.string() + "/", cols()), ArgumentError);
  fs::create_directories(dir / "d.tsv");
  EXPECT_THROW(TextClassificationData::load((dir / "d.tsv").string(), cols()), IoError);
  fs::remove_all(dir);
}

TEST(TextClassification, FineFoodsTask) {
  const TextClassificationTask t = finefoods_task();
  EXPECT_EQ(t.train.examples.size(), 4000u);
  EXPECT_EQ(t.test.examples.size(), 1000u);
  EXPECT_EQ(t.train.labels, (std::vector<std::string>{"great", "other"}));
  EXPECT_EQ(t.test.labels, t.train.labels);
  EXPECT_EQ(t.train.class_counts(), (std::vector<int64_t>{2600, 1400}));
  EXPECT_EQ(t.test.class_counts(), (std::vector<int64_t>{658, 342}));
  EXPECT_DOUBLE_EQ(t.test.majority_baseline(), 0.658);
  int64_t with_tags = 0;  // the raw text, HTML line breaks kept (as in IMDB)
  for (const TextExample& e : t.train.examples) with_tags += e.text.find("<br />") != std::string::npos;
  EXPECT_GT(with_tags, 0);
}

TEST(TextClassification, FortunesTopicSplit) {
  const TextClassificationData all = fortunes_topic_entries();
  ASSERT_EQ(all.examples.size(), 3929u);
  const std::vector<int64_t> per_topic = {1023, 198, 150, 697, 621, 146, 225, 74, 206, 51, 336, 202};
  EXPECT_EQ(all.class_counts(), per_topic);
  for (const TextExample& e : all.examples) {
    ASSERT_GT(e.text.size(), 20u);
    ASSERT_NE(e.text.front(), '\n');
    ASSERT_NE(e.text.back(), '\n');
  }
  const TextClassificationTask t = fortunes_topic_task();
  EXPECT_EQ(t.train.examples.size(), 3143u);
  EXPECT_EQ(t.test.examples.size(), 786u);
  EXPECT_EQ(t.test.labels.size(), 12u);
  // Train and test partition the entries (by topic and line), in file order.
  std::set<std::pair<int32_t, int64_t>> seen;
  for (const auto* part : {&t.train, &t.test}) {
    for (size_t i = 0; i < part->examples.size(); ++i) {
      const TextExample& e = part->examples[i];
      EXPECT_TRUE(seen.emplace(e.label, e.line).second);
      if (i > 0) {
        EXPECT_LT(std::make_pair(part->examples[i - 1].label, part->examples[i - 1].line),
                  std::make_pair(e.label, e.line));
      }
    }
  }
  EXPECT_EQ(seen.size(), 3929u);
  // The majority class (computers) is about a quarter of the test set.
  EXPECT_GT(t.test.majority_baseline(), 0.22);
  EXPECT_LT(t.test.majority_baseline(), 0.31);
  std::printf("fortunes topics: %zu entries, %zu train / %zu test, test majority %.4f\n", all.examples.size(),
              t.train.examples.size(), t.test.examples.size(), t.test.majority_baseline());
  // The same seed gives the same split; another seed another.
  const TextClassificationTask again = fortunes_topic_task(kDefaultFortunesDir, 0);
  const TextClassificationTask other = fortunes_topic_task(kDefaultFortunesDir, 1);
  ASSERT_EQ(again.test.examples.size(), t.test.examples.size());
  int same = 0, same_other = 0;
  for (size_t i = 0; i < t.test.examples.size(); ++i) {
    same += again.test.examples[i].line == t.test.examples[i].line &&
            again.test.examples[i].label == t.test.examples[i].label;
    same_other += other.test.examples[i].line == t.test.examples[i].line &&
                  other.test.examples[i].label == t.test.examples[i].label;
  }
  EXPECT_EQ(same, 786);
  EXPECT_LT(same_other, 200);
  EXPECT_THROW(fortunes_topic_task(kDefaultFortunesDir, 0, 1.0), ArgumentError);
  EXPECT_THROW(fortunes_topic_entries("/nonexistent-fortunes"), IoError);
}

TEST(TextClassification, FortunesEntriesFromAFolder) {
  const fs::path dir = fs::temp_directory_path() / ("mixtrain_fortunes_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* topic : kFortuneTopics) std::ofstream(dir / topic) << "";
  std::ofstream(dir / "food") << "  short one  \n%\n\nA fortune about food, long enough.\n\n%\n%\nLast one "
                                 "without a final percent line\n";
  const TextClassificationData d = fortunes_topic_entries(dir.string());
  ASSERT_EQ(d.examples.size(), 2u);
  EXPECT_EQ(d.examples[0].text, "A fortune about food, long enough.");
  EXPECT_EQ(d.examples[0].line, 3);
  EXPECT_EQ(d.examples[0].label, 1);
  EXPECT_EQ(d.examples[1].text, "Last one without a final percent line");
  EXPECT_EQ(d.examples[1].line, 8);
  std::ofstream(dir / "law") << "\xFF\xFE not UTF-8, and long enough\n";
  try {
    fortunes_topic_entries(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "law").string() + ":1: column 'entry' is not valid UTF-8");
  }
  fs::remove_all(dir);
}

TEST(TextClassification, BuiltinDataPathSaysHowToGetIt) {
  try {
    builtin_data_path("no/such/file.tsv");
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/setup.sh"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(builtin_data_path("models/all-minilm-l6-v2/vocab.txt")));
}

}  // namespace
}  // namespace mixtrain
