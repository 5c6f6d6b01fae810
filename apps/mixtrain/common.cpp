// Helpers shared by the subcommands.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "commands.h"
#include "mixtrain/core/error.h"
#include "mixtrain/dist/rank_agreement.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/train/output_paths.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::cli {

namespace {

// OMP_NUM_THREADS, when it decides the thread count (no --threads), is held to --threads' range:
// OpenMP would try to start what it says (100000 threads: a crash; 20000: a hang). Its first
// entry is the count (a list sets nested levels, which mixtrain does not use).
void check_omp_num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr) return;
  const std::string all(env);
  const std::string first = all.substr(0, all.find(','));
  const bool digits =
      !first.empty() && first.size() <= 9 &&
      std::all_of(first.begin(), first.end(), [](unsigned char c) { return std::isdigit(c); });
  const long n = digits ? std::stol(first) : 0;
  if (n < 1 || n > kMaxThreads)
    throw ArgumentError("OMP_NUM_THREADS='" + all + "' must be a thread count in [1, " +
                        std::to_string(kMaxThreads) + "], as --threads (which overrides it)");
}

}  // namespace

void apply_global_options(const GlobalOptions& g) {
  if (g.threads > 0) {
    set_num_threads(g.threads);
    return;
  }
  check_omp_num_threads();
  // Under mpirun the ranks on one machine share its cores: without --threads or OMP_NUM_THREADS
  // each takes its share (at least one), instead of every rank taking all of them.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local != nullptr ? std::atoi(local) : 1;
  if (ranks > 1 && std::getenv("OMP_NUM_THREADS") == nullptr)
    set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks));
}

void write_file_atomic(const std::string& path, const std::string& text) {
  // "-" is stdout, a device or FIFO is written through, a regular file (at a symlink's target)
  // replaced atomically; every write checked (train/output_paths.h).
  write_output_file(path, text, "output");
}

void check_output_path(const std::string& path, const std::string& flag) {
  check_output_path(path, flag, {});
}

void check_output_path(const std::string& path, const std::string& flag,
                       const std::vector<std::pair<std::string, std::string>>& inputs) {
  RunPaths p;
  p.outputs.push_back({flag, path});
  for (const auto& [what, in] : inputs)
    if (!in.empty()) p.inputs.push_back({what, in});
  check_run_paths(p);
}

nlohmann::ordered_json json_of(const std::string& text) { return nlohmann::ordered_json::parse(text); }

nlohmann::ordered_json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

std::string one_line(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

void add_json_output(RunOptions& o, const std::string& json) {
  if (!json.empty() && json != "-") o.also_writes.push_back({"--json", json});
}

Communicator& join_world(const std::string& command) {
  Communicator& w = world();
  check_ranks_agree(w, {{"command " + command, ""}});  // in the name: "different commands or tasks"
  return w;
}

int report_divergence(const TrainSummary& s) {
  std::fprintf(
      stderr,
      "mixtrain: error: training diverged: %s; lower --lr, enable --grad-clip, or use a precision with "
      "loss scaling or fp32 master weights\n",
      s.divergence.c_str());
  return kExitDiverged;
}

CLI::Option* add_json_option(CLI::App* sub, std::string& path, const std::string& what) {
  return sub->add_option("--json", path, what + " as JSON to FILE (- or --json alone: stdout)")
      ->expected(0, 1)
      ->type_name("[FILE]");
}

std::string json_output(const CLI::App& sub, const std::string& path) {
  if (sub.count("--json") == 0) return "";
  return path.empty() ? "-" : path;
}

namespace {

// The flag that sets a library field: the field's last part with dashes (seq_len -> --seq-len,
// checkpoint.keep -> --keep), except where the flag says more than the field.
std::string flag_for_field(const std::string& field) {
  static const std::map<std::string, std::string> kIrregular = {
      {"checkpoint.dir", "--checkpoint-dir"},
      {"tensorboard_dir", "--tensorboard"},
      {"numerics.path", "--numerics"},
      {"numerics.every", "--numerics-every"},
      {"train_path", "--train"},  // FinetuneOptions
      {"test_path", "--test"},
      {"model_dir", "--model"},
      {"save_dir", "--save"},
      {"data_parallel.zero_stage", "--zero"},  // the ranks' agreement (dist/rank_agreement.h)
      {"data_parallel.reduce_dtype", "--grad-reduce-dtype"},
      {"data_parallel.bucket_bytes", "--bucket-mb"},
      {"overflow_forensics", "--no-overflow-forensics"},
  };
  if (const auto it = kIrregular.find(field); it != kIrregular.end()) return it->second;
  std::string name = field.substr(field.rfind('.') + 1);
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

bool has_flag(const CLI::App& command, const std::string& flag) {
  for (const CLI::App* a = &command; a != nullptr; a = a->get_parent())
    if (a->get_option_no_throw(flag) != nullptr) return true;
  return false;
}

// Part of a name or a path (so "steps" in "/runs/steps/x" or "max_bad_steps" is left alone).
bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '/';
}

// Replaces every whole-word occurrence of `word` in `text` by `by`.
std::string replace_word(const std::string& text, const std::string& word, const std::string& by) {
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    const bool starts = at == 0 || (!word_char(text[at - 1]) && text[at - 1] != '.');
    // A dot ends a sentence but joins a file name ("steps.json").
    const bool ends = end == text.size() ||
                      (!word_char(text[end]) && !(text[end] == '.' && end + 1 < text.size() &&
                                                  std::isalnum(static_cast<unsigned char>(text[end + 1]))));
    if (!starts || !ends || at < from) continue;
    out += text.substr(from, at - from) + by;
    from = end;
  }
  return out + text.substr(from);
}

}  // namespace

const CLI::App& selected_command(const CLI::App& app) {
  const CLI::App* a = &app;
  for (std::vector<CLI::App*> subs = a->get_subcommands(); !subs.empty(); subs = a->get_subcommands())
    a = subs.front();
  return *a;
}

std::string error_message(const Error& e, const CLI::App& command) {
  std::string msg = e.what();
  for (const std::string& field : e.fields()) {
    const std::string flag = flag_for_field(field);
    if (has_flag(command, flag)) msg = replace_word(msg, field, flag);
  }
  return msg;
}

}  // namespace mixtrain::cli
