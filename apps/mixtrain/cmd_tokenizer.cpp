// `mixtrain tokenizer train|encode|decode`: GPT-2's byte-level BPE (data/bpe_tokenizer.h):
// learn merges from a corpus and write Hugging Face's vocab.json + merges.txt, encode each line of
// a file, decode lists of ids.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "mixtrain/data/bpe_tokenizer.h"

namespace mixtrain::cli {
namespace {

std::string read_whole(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(std::string(flag) + " '" + path + "': cannot be read");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw IoError(std::string(flag) + " '" + path + "': read error");
  return std::move(s).str();
}

// The lines of a text without their '\n' (a last line without one counts; no line after a final
// '\n').
std::vector<std::string_view> lines_of(const std::string& text) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    out.emplace_back(text.data() + pos, end - pos);
    pos = end + 1;
  }
  return out;
}

}  // namespace

void register_tokenizer(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* tok = app.add_subcommand("tokenizer", "Byte-level BPE (GPT-2's): train a vocabulary, encode, decode");
  tok->require_subcommand(1);

  struct TrainFlags {
    std::string data, output;
    int64_t vocab_size = 30000, min_frequency = 2;
  };
  auto t = std::make_shared<TrainFlags>();
  auto* train = tok->add_subcommand(
      "train",
      "Learn merges from a UTF-8 text file (Hugging Face's BpeTrainer, ByteLevelBPETokenizer's "
      "defaults) and write vocab.json and merges.txt");
  train->add_option("--data", t->data, "The corpus (read as lines)")->required();
  train->add_option("--vocab-size", t->vocab_size, "Tokens in the vocabulary (the 256 bytes included)")
      ->check(CLI::Range(int64_t{256}, int64_t{1} << 30))
      ->capture_default_str();
  train->add_option("--min-frequency", t->min_frequency, "A pair seen fewer times is not merged")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  train->add_option("--output", t->output, "The directory to write (created if missing)")->required();
  commands.push_back(
      {[train] { return train->parsed(); },
       [&g, t] {
         apply_global_options(g);
         // An existing directory gets vocab.json and merges.txt; else one is made
         // where a file could be.
         struct stat st {};
         if (::stat(t->output.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
           check_output_path(t->output + "/vocab.json", "--output", {{"--data", t->data}});
           check_output_path(t->output + "/merges.txt", "--output", {{"--data", t->data}});
         } else {
           check_output_path(t->output, "--output", {{"--data", t->data}});
         }
         const std::string text = read_whole(t->data, "--data");
         const auto start = std::chrono::steady_clock::now();
         BpeTrainOptions o;
         o.vocab_size = t->vocab_size;
         o.min_frequency = t->min_frequency;
         const BpeTokenizer bpe = train_bpe(text, o, t->data);
         const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
         bpe.save(t->output);
         std::printf(
             "tokenizer: %lld tokens, %lld merges from %zu bytes in %.2f s -> %s/vocab.json, "
             "%s/merges.txt\n",
             static_cast<long long>(bpe.vocab_size()), static_cast<long long>(bpe.num_merges()), text.size(),
             s, t->output.c_str(), t->output.c_str());
         return 0;
       }});

  struct CodeFlags {
    std::string tokenizer, file;
    bool json = false, stats = false;
  };
  auto e = std::make_shared<CodeFlags>();
  auto* encode = tok->add_subcommand("encode", "Encode each line of a file as one text: its ids on one line");
  encode
      ->add_option("--tokenizer", e->tokenizer, "A directory with tokenizer.json or vocab.json + merges.txt")
      ->required();
  encode->add_option("--file", e->file, "UTF-8 text")->required();
  encode->add_flag("--json", e->json, "One JSON list of ids a line (default: ids separated by spaces)");
  encode->add_flag("--stats", e->stats,
                   "Also say on stderr how many lines, bytes and tokens were encoded, in how long (the "
                   "encoding alone, one thread: what bench/tokenizer_bench.sh times)");
  commands.push_back(
      {[encode] { return encode->parsed(); },
       [&g, e] {
         apply_global_options(g);
         const BpeTokenizer bpe = BpeTokenizer::from_dir(e->tokenizer);
         const std::string text = read_whole(e->file, "--file");
         std::string out;
         size_t line_no = 0;
         int64_t tokens = 0;
         double encode_s = 0;
         for (const std::string_view line : lines_of(text)) {
           ++line_no;
           std::vector<int32_t> ids;
           const auto t0 = std::chrono::steady_clock::now();
           try {
             ids = bpe.encode(line);
           } catch (const ArgumentError& err) {
             throw ArgumentError("--file '" + e->file + "':" + std::to_string(line_no) + ": " + err.what());
           }
           encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
           tokens += int64_t(ids.size());
           if (e->json) out += '[';
           for (size_t k = 0; k < ids.size(); ++k) {
             if (k) out += e->json ? "," : " ";
             out += std::to_string(ids[k]);
           }
           out += e->json ? "]\n" : "\n";
         }
         std::fwrite(out.data(), 1, out.size(), stdout);
         if (e->stats)
           std::fprintf(stderr, "encoded %zu lines, %zu bytes, %lld tokens in %.3f s (%.2f MB/s)\n", line_no,
                        text.size(), static_cast<long long>(tokens), encode_s,
                        encode_s > 0 ? double(text.size()) / encode_s / 1e6 : 0.0);
         return std::fflush(stdout) == 0 ? 0 : 1;
       }});

  auto d = std::make_shared<CodeFlags>();
  auto* decode = tok->add_subcommand(
      "decode", "Decode each line of a file (ids separated by spaces, or a JSON list) to one line of text");
  decode
      ->add_option("--tokenizer", d->tokenizer, "A directory with tokenizer.json or vocab.json + merges.txt")
      ->required();
  decode->add_option("--file", d->file, "Ids, one text a line")->required();
  commands.push_back(
      {[decode] { return decode->parsed(); },
       [&g, d] {
         apply_global_options(g);
         const BpeTokenizer bpe = BpeTokenizer::from_dir(d->tokenizer);
         const std::string text = read_whole(d->file, "--file");
         std::string out;
         size_t line_no = 0;
         for (const std::string_view line : lines_of(text)) {
           ++line_no;
           const std::string where = "--file '" + d->file + "':" + std::to_string(line_no) + ": ";
           std::vector<int32_t> ids;
           const size_t first = line.find_first_not_of(" \t\r");
           if (first != std::string_view::npos && line[first] == '[') {
             nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
             if (!j.is_array()) throw ArgumentError(where + "not a JSON list");
             for (const auto& v : j) {
               if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
                 throw ArgumentError(where + "an id is not a non-negative integer");
               ids.push_back(int32_t(v.get<int64_t>()));
             }
           } else {
             std::istringstream in{std::string(line)};
             std::string word;
             while (in >> word) {
               size_t used = 0;
               long long v = -1;
               try {
                 v = std::stoll(word, &used);
               } catch (const std::exception&) {
                 used = 0;
               }
               if (used != word.size() || v < 0 || v > INT32_MAX)
                 throw ArgumentError(where + "'" + word + "' is not an id");
               ids.push_back(int32_t(v));
             }
           }
           try {
             out += bpe.decode(ids);
           } catch (const ArgumentError& err) {
             throw ArgumentError(where + err.what());
           }
           out += '\n';
         }
         std::fwrite(out.data(), 1, out.size(), stdout);
         return std::fflush(stdout) == 0 ? 0 : 1;
       }});
}

}  // namespace mixtrain::cli
