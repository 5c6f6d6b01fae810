// BpeTokenizer: loading Hugging Face's BPE files, step 3 (merging by rank) and decoding; see
// bpe_tokenizer.h. Steps 1-2 are in bpe_pretokenize.cpp, training in bpe_trainer.cpp.
#include "mixtrain/data/bpe_tokenizer.h"

#include <sys/stat.h>
#include <unicode/utf8.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <queue>
#include <sstream>

#include "core/file_io.h"
#include "core/json_input.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

namespace {

constexpr size_t kCacheEntries = 1 << 16;  // pre-tokens remembered (then the cache starts over)
constexpr uint64_t kMaxFileBytes = 1ull << 30;

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(std::string(what) + " '" + path + "': cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw IoError(std::string(what) + " '" + path + "': read error");
  std::string text = std::move(s).str();
  if (text.size() > kMaxFileBytes) throw IoError(std::string(what) + " '" + path + "': larger than 1 GiB");
  return text;
}

bool valid_utf8(std::string_view s) {
  const int32_t n = int32_t(std::min<size_t>(s.size(), INT32_MAX));
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s.data(), i, n, c);
    if (c < 0) return false;
  }
  return true;
}

// vocab object (token -> id) to tokens by id: every id in [0, V) exactly once.
std::vector<std::string> tokens_from_vocab(const nlohmann::json& vocab, const std::string& what) {
  if (!vocab.is_object()) throw IoError(what + ": the vocabulary is not a JSON object");
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [tok, v] : vocab.items()) {
    if (!v.is_number_integer())
      throw IoError(what + ": the id of '" + tok + "' is not an integer (" + json_excerpt(v) + ")");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= int64_t(tokens.size()))
      throw IoError(what + ": the id of '" + tok + "' is " + std::to_string(id) + ", outside [0, " +
                    std::to_string(tokens.size()) + ") (ids must be 0..V-1, each once)");
    if (seen[size_t(id)])
      throw IoError(what + ": id " + std::to_string(id) + " is given to both '" + tokens[size_t(id)] +
                    "' and '" + tok + "'");
    seen[size_t(id)] = true;
    tokens[size_t(id)] = tok;
  }
  return tokens;
}

// "A B" -> (A, B): exactly one space, both sides non-empty.
bool split_merge(std::string_view line, std::pair<std::string, std::string>& out) {
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() ||
      line.find(' ', sp + 1) != std::string_view::npos)
    return false;
  out = {std::string(line.substr(0, sp)), std::string(line.substr(sp + 1))};
  return true;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_tokens(std::vector<std::string> tokens,
                                       const std::vector<std::pair<std::string, std::string>>& merges,
                                       const std::string& name) {
  if (tokens.size() >= size_t(INT32_MAX)) throw IoError(name + ": too many tokens");
  BpeTokenizer t;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) throw IoError(name + ": token " + std::to_string(i) + " is empty");
    if (!valid_utf8(tokens[i])) throw IoError(name + ": token " + std::to_string(i) + " is not valid UTF-8");
    const auto [it, fresh] = t.ids_.emplace(tokens[i], int32_t(i));
    if (!fresh)
      throw IoError(name + ": token '" + tokens[i] + "' has two ids (" + std::to_string(it->second) +
                    " and " + std::to_string(i) + ")");
  }
  t.tokens_ = std::move(tokens);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    char buf[U8_MAX_LENGTH];
    int32_t len = 0;
    U8_APPEND_UNSAFE(buf, len, UChar32(byte_char(uint8_t(b))));
    s.assign(buf, size_t(len));
    t.byte_ids_[b] = t.id(s);
  }
  // A pair listed twice keeps its later rank (Hugging Face's merges map): drop earlier copies.
  std::unordered_map<uint64_t, size_t> last;
  std::vector<std::pair<int32_t, int32_t>> pair_ids(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& a = merges[r].first;   // not a structured binding: clang 14 (the fuzz
    const std::string& b = merges[r].second;  // build) cannot capture one in the lambda below
    const int32_t ia = t.id(a), ib = t.id(b), inew = t.id(a + b);
    const auto missing = [&](const std::string& s) {
      return IoError(name + ": merge " + std::to_string(r + 1) + " '" + a + " " + b + "': '" + s +
                     "' is not in the vocabulary");
    };
    if (ia < 0) throw missing(a);
    if (ib < 0) throw missing(b);
    if (inew < 0) throw missing(a + b);
    pair_ids[r] = {ia, ib};
    last[pair_key(ia, ib)] = r;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const uint64_t key = pair_key(pair_ids[r].first, pair_ids[r].second);
    if (last[key] != r) continue;
    t.merge_rules_[key] = {uint32_t(t.merges_.size()), t.id(merges[r].first + merges[r].second)};
    t.merges_.push_back(merges[r]);
  }
  return t;
}

BpeTokenizer BpeTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  const std::string vwhat = "vocabulary '" + vocab_json + "'";
  std::vector<std::string> tokens =
      tokens_from_vocab(parse_untrusted_json(read_text_file(vocab_json, "vocabulary"), vwhat), vwhat);
  const std::string text = read_text_file(merges_txt, "merges");
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    std::pair<std::string, std::string> m;
    if (!split_merge(line, m))
      throw IoError("merges '" + merges_txt + "':" + std::to_string(line_no) +
                    ": expected two tokens separated by one space");
    merges.push_back(std::move(m));
  }
  return from_tokens(std::move(tokens), merges, "'" + vocab_json + "' + '" + merges_txt + "'");
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) {
  const std::string what = "tokenizer '" + path + "'";
  const nlohmann::json j = parse_untrusted_json(read_text_file(path, "tokenizer"), what);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw IoError(what + ": no \"model\" object");
  const nlohmann::json& m = j["model"];
  if (!m.contains("type") || m["type"] != "BPE")
    throw IoError(what + ": model.type is " + (m.contains("type") ? json_excerpt(m["type"]) : "missing") +
                  ", not \"BPE\"");
  const auto absent_or = [&](const char* key, const nlohmann::json& want) {
    if (m.contains(key) && !m[key].is_null() && m[key] != want)
      throw IoError(what + ": model." + key + " = " + json_excerpt(m[key]) + " is not supported (only " +
                    want.dump() + ")");
  };
  absent_or("dropout", nullptr);
  absent_or("unk_token", nullptr);
  absent_or("continuing_subword_prefix", nullptr);
  absent_or("end_of_word_suffix", nullptr);
  absent_or("byte_fallback", false);
  absent_or("ignore_merges", false);
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    throw IoError(what + ": a normalizer (" + json_excerpt(j["normalizer"]) + ") is not supported");
  const nlohmann::json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json();
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel" || pre.value("add_prefix_space", false) ||
      !pre.value("use_regex", true))
    throw IoError(what +
                  ": the pre-tokenizer must be ByteLevel (add_prefix_space false, use_regex true), got " +
                  json_excerpt(pre));
  if (!m.contains("vocab")) throw IoError(what + ": no model.vocab");
  std::vector<std::string> tokens = tokens_from_vocab(m["vocab"], what + " model.vocab");
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.contains("merges")) {
    if (!m["merges"].is_array()) throw IoError(what + ": model.merges is not a list");
    for (size_t r = 0; r < m["merges"].size(); ++r) {
      const nlohmann::json& e = m["merges"][r];
      std::pair<std::string, std::string> p;
      bool ok = false;
      if (e.is_string()) {
        ok = split_merge(e.get<std::string>(), p);  // "A B" (tokenizers < 0.20)
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        p = {e[0].get<std::string>(), e[1].get<std::string>()};  // ["A", "B"]
        ok = !p.first.empty() && !p.second.empty();
      }
      if (!ok)
        throw IoError(what + ": model.merges[" + std::to_string(r) + "] = " + json_excerpt(e) +
                      " is neither \"A B\" nor [\"A\", \"B\"]");
      merges.push_back(std::move(p));
    }
  }
  // Added tokens: ids outside the model's vocabulary extend it (Hugging Face's AddedVocabulary).
  std::vector<std::pair<std::string, int32_t>> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) throw IoError(what + ": added_tokens is not a list");
    for (const nlohmann::json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id") ||
          !a["id"].is_number_integer())
        throw IoError(what + ": an added token is not {\"id\": N, \"content\": \"...\"}: " + json_excerpt(a));
      const std::string content = a["content"].get<std::string>();
      const int64_t id = a["id"].get<int64_t>();
      if (content.empty() || !valid_utf8(content))
        throw IoError(what + ": an added token's content is empty or not UTF-8");
      if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false) ||
          a.value("normalized", false))
        throw IoError(what + ": added token '" + content +
                      "': lstrip, rstrip, single_word and normalized are not supported");
      if (id == int64_t(tokens.size())) {
        tokens.push_back(content);
      } else if (id < 0 || id > int64_t(tokens.size()) || tokens[size_t(id)] != content) {
        throw IoError(what + ": added token '" + content + "' has id " + std::to_string(id) +
                      ", which is neither its vocabulary id nor the next free one");
      }
      added.emplace_back(content, int32_t(id));
    }
  }
  BpeTokenizer t = from_tokens(std::move(tokens), merges, what);
  std::stable_sort(added.begin(), added.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  t.added_ = std::move(added);
  return t;
}

BpeTokenizer BpeTokenizer::from_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw IoError("tokenizer directory '" + dir + "': not a directory");
  const std::string tj = dir + "/tokenizer.json";
  if (::stat(tj.c_str(), &st) == 0) return from_tokenizer_json(tj);
  return from_files(dir + "/vocab.json", dir + "/merges.txt");
}

const std::string& BpeTokenizer::token(int32_t id) const {
  if (id < 0 || id >= int32_t(tokens_.size()))
    throw ArgumentError("BpeTokenizer::token: id " + std::to_string(id) + " is outside [0, " +
                        std::to_string(tokens_.size()) + ")");
  return tokens_[size_t(id)];
}

int32_t BpeTokenizer::id(std::string_view tok) const {
  const auto it = ids_.find(std::string(tok));
  return it == ids_.end() ? -1 : it->second;
}

// Step 3 on one pre-token (its raw bytes), as Hugging Face's Word::merge_all: a min-heap of
// (rank, position) over adjacent pairs; a popped entry whose pair has changed since is skipped.
void BpeTokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    const auto it = cache_.find(std::string(bytes));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1: none
    bool gone;
  };
  std::vector<Symbol> s;
  s.reserve(bytes.size());
  for (const char ch : bytes) {
    const int32_t id = byte_ids_[uint8_t(ch)];
    if (id < 0) continue;  // not in the vocabulary, no unknown token: dropped
    const int32_t k = int32_t(s.size());
    s.push_back({id, k - 1, -1, false});
    if (k > 0) s[size_t(k - 1)].next = k;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto consider = [&](int32_t pos) {
    const int32_t nx = s[size_t(pos)].next;
    if (nx < 0) return;
    const auto it = merge_rules_.find(pair_key(s[size_t(pos)].id, s[size_t(nx)].id));
    if (it != merge_rules_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t k = 0; k + 1 < int32_t(s.size()); ++k) consider(k);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = s[size_t(top.pos)];
    if (left.gone || left.next < 0) continue;
    const auto it = merge_rules_.find(pair_key(left.id, s[size_t(left.next)].id));
    if (it == merge_rules_.end() || it->second.new_id != top.new_id) continue;  // expired
    Symbol& right = s[size_t(left.next)];
    left.id = top.new_id;
    right.gone = true;
    left.next = right.next;
    if (right.next >= 0) s[size_t(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  const size_t first = out.size();
  for (const Symbol& x : s)
    if (!x.gone) out.push_back(x.id);
  std::lock_guard<std::mutex> lock(*cache_mutex_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(std::string(bytes), std::vector<int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  const auto encode_span = [&](size_t begin, size_t end) {
    const std::string_view span = text.substr(begin, end - begin);
    for (const auto& [b, e] : pre_tokenize(span, begin)) encode_piece(span.substr(b, e - b), ids);
  };
  size_t pos = 0;
  if (!added_.empty()) {
    for (size_t i = 0; i < text.size();) {
      bool hit = false;
      for (const auto& [tok, id] : added_) {
        if (text.compare(i, tok.size(), tok) == 0) {
          encode_span(pos, i);
          ids.push_back(id);
          i += tok.size();
          pos = i;
          hit = true;
          break;
        }
      }
      if (!hit) ++i;
    }
  }
  encode_span(pos, text.size());
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) {
    const std::string& tok = token(id);
    if (std::any_of(added_.begin(), added_.end(), [&](const auto& a) { return a.second == id; })) {
      out += tok;  // added tokens are literal text
      continue;
    }
    const int32_t n = int32_t(tok.size());
    for (int32_t i = 0; i < n;) {
      UChar32 c;
      U8_NEXT(tok.data(), i, n, c);
      const int b = c < 0 ? -1 : char_byte(uint32_t(c));
      if (b < 0)
        throw ArgumentError("BpeTokenizer::decode: token " + std::to_string(id) + " '" + tok +
                            "' holds a character that stands for no byte");
      out.push_back(char(b));
    }
  }
  return out;
}

void BpeTokenizer::save(const std::string& dir) const {
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw IoError("tokenizer directory '" + dir + "': cannot be created (" + std::strerror(errno) + ")");
  for (const auto& [name, text] : files()) write_file_durable(dir + "/" + name, text);
}

std::vector<std::pair<std::string, std::string>> BpeTokenizer::files() const {
  std::string vocab = "{";
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (i) vocab += ',';
    vocab += nlohmann::json(tokens_[i]).dump();
    vocab += ':' + std::to_string(i);
  }
  vocab += '}';
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) merges += a + ' ' + b + '\n';
  return {{"vocab.json", std::move(vocab)}, {"merges.txt", std::move(merges)}};
}

std::string BpeTokenizer::fingerprint() const {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&](std::string_view s) {
    for (const char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
    h = (h ^ 0xFF) * 0x100000001b3ull;  // a separator no UTF-8 text holds
  };
  for (const std::string& t : tokens_) mix(t);
  mix("merges");
  for (const auto& [a, b] : merges_) mix(a + ' ' + b);
  mix("added");
  for (const auto& [tok, id] : added_) mix(tok + ' ' + std::to_string(id));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace mixtrain
