// Labelled text for sequence classification: TSV, CSV and JSONL files with named columns (a text,
// optionally a second text for sentence pairs, a label), and the built-in tasks (the Fine Foods
// reviews, the topics of Debian's fortunes). Labels are names in the file; a data set maps them to
// class ids 0..K-1 with a label list that the training set defines and the test set (and a saved
// model) reuses.
//
// Formats (chosen by the file's extension: .tsv, .csv, .jsonl):
//   TSV    a header line of column names, then one row a line; fields separated by tabs, no
//          quoting (a field cannot hold a tab or a line break: IANA text/tab-separated-values).
//   CSV    RFC 4180: a header record, fields separated by commas, a field in double quotes may
//          hold commas, line breaks and "" (a quote); CRLF or LF line ends.
//   JSONL  one JSON object a line; the text columns must be strings, the label a string or an
//          integer (its decimal form is the label name).
// Blank lines are skipped; every row needs every named column. A bad row is an IoError naming
// the file and its line ("data.csv:17: ..."); so is a file that is not UTF-8.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixtrain {

enum class TextFormat { tsv, csv, jsonl };

// From the extension (.tsv, .csv, .jsonl); ArgumentError for any other.
TextFormat text_format_from_path(const std::string& path);

struct TextColumns {
  std::string text = "text";
  std::string text_pair;  // empty: single texts
  std::string label = "label";
};

struct TextExample {
  std::string text;
  std::string text_pair;  // empty unless the columns name a pair column
  int32_t label = 0;      // class id: index into TextClassificationData::labels
  int64_t line = 0;       // the line of the file where the row starts (1-based)
};

struct TextClassificationData {
  std::string path;                 // for messages
  std::vector<std::string> labels;  // class id -> label name
  std::vector<TextExample> examples;

  // Reads a file. Without `labels`, the class list is the file's label names sorted (byte
  // order), so the ids do not depend on the order of the rows; with `labels` (the training set's,
  // or a model's), those ids are used and a label not in the list is an error at its row.
  static TextClassificationData load(const std::string& path, const TextColumns& columns,
                                     const std::vector<std::string>* labels = nullptr);
  // The same from text in memory; `name` stands for the path in messages.
  static TextClassificationData parse(std::string_view content, TextFormat format, const std::string& name,
                                      const TextColumns& columns,
                                      const std::vector<std::string>* labels = nullptr);

  // Examples per class id.
  std::vector<int64_t> class_counts() const;
  // The accuracy of always answering the most frequent class (0 for an empty set).
  double majority_baseline() const;
};

struct TextClassificationTask {
  std::string name;
  TextClassificationData train;
  TextClassificationData test;  // uses train's label list
};

// The Amazon Fine Foods reviews (builtin_data_path("finefoods/{train,test}.tsv"), columns
// review and score): 4,000 train / 1,000 test, labels {great, other}.
TextClassificationTask finefoods_task();

// Topic classification of Debian's fortunes (package `fortunes`): the 12 files of
// kFortuneTopics in `fortunes_dir`, entries separated by lines holding only '%'; an entry is the
// text between two such lines with surrounding whitespace removed, kept when longer than 20
// bytes; its label is the file's name. The entries (files in kFortuneTopics order, entries in
// file order) are shuffled with a Fisher-Yates shuffle driven by counter_rng(seed, i); the first
// llround(test_fraction * n) form the test set, the rest the training set, each kept in file
// order. With the package's files: 3,929 entries, 3,143 train / 786 test.
inline constexpr const char* kFortuneTopics[] = {"computers", "food",   "love",     "politics",
                                                 "science",   "sports", "startrek", "medicine",
                                                 "law",       "pets",   "linux",    "education"};
inline constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";
TextClassificationTask fortunes_topic_task(const std::string& fortunes_dir = kDefaultFortunesDir,
                                           uint64_t seed = 0, double test_fraction = 0.2);
// Every kept entry of the 12 files in that order, before the split (label = topic id).
TextClassificationData fortunes_topic_entries(const std::string& fortunes_dir = kDefaultFortunesDir);

}  // namespace mixtrain
