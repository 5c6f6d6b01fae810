// The subcommands of the CLI. Each register_* adds its CLI11 subcommand(s) and a Command entry
// whose run() does the work once parsing succeeded.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtrain/core/error.h"
#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {
struct NumericsAdvice;
}  // namespace mixtrain

namespace mixtrain::cli {

struct GlobalOptions {
  int threads = 0;  // 0: all cores
};

struct Command {
  std::function<bool()> selected;
  std::function<int()> run;
};

// --threads' range (and OMP_NUM_THREADS's, when it sets the count).
constexpr int kMaxThreads = 4096;
// Applies --threads (to OpenMP and oneDNN) before a command runs; without it, refuses an
// OMP_NUM_THREADS outside [1, kMaxThreads] (ArgumentError).
void apply_global_options(const GlobalOptions& g);

// A crash (SIGSEGV, SIGABRT, ...) prints its backtrace as offsets for addr2line (crash_report.cpp).
void install_crash_report();

// Writes text to path whole: "-" is stdout, a device or FIFO is written through, a regular file
// (at a symlink's target) is replaced atomically (never half-written); every write checked.
void write_file_atomic(const std::string& path, const std::string& text);
// Refuses an output path before any work (a directory, unwritable, a missing directory):
// ArgumentError naming `flag`. Called for a flag the command was given, before it runs.
void check_output_path(const std::string& path, const std::string& flag);
// The same, and not over any of `inputs` (flag, path: files or directories the command reads).
void check_output_path(const std::string& path, const std::string& flag,
                       const std::vector<std::pair<std::string, std::string>>& inputs);
// A --json FILE the command writes when the run ends, checked with the run's own inputs and
// outputs before anything is loaded (RunOptions::also_writes); nothing for none or "-" (stdout).
void add_json_output(RunOptions& o, const std::string& json);
// The ranks of this process (MPI's under mpirun), after every rank has agreed that it runs
// `command` (one rank running train and another compare would deadlock or drift apart):
// ArgumentError on every rank otherwise (dist/rank_agreement.h).
Communicator& join_world(const std::string& command);

// `--json [FILE]`, as every command spells it: the JSON goes to FILE, replaced atomically; `-`
// or `--json` alone (the flag it was in `train`, `info` and `numerics`) is stdout.
// json_output(sub, path) after parsing: path, "-" when the flag was given bare, "" when not given.
CLI::Option* add_json_option(CLI::App* sub, std::string& path, const std::string& what);
std::string json_output(const CLI::App& sub, const std::string& path);

// A run that returned diverged (TrainSummary::divergence: its final loss is not finite): the
// one-line error on stderr, as for a run stopped by --max-bad-steps. Returns kExitDiverged.
int report_divergence(const TrainSummary& s);

// The library's JSON forms come as text (mixtrain/train/results_json.h, mixtrain/report/
// html_report.h): parsed here, key order kept, to be combined into the CLI's JSON outputs.
nlohmann::ordered_json json_of(const std::string& text);
// JSON has no inf or NaN: a non-finite number becomes null.
nlohmann::ordered_json finite_or_null(double v);

// A message made one line for the terminal: control characters (a newline or an escape sequence
// in a path or a label) shown as \n, \t, \r or \xNN, so an error stays one line and cannot
// rewrite the screen; other bytes (UTF-8) are kept.
std::string one_line(const std::string& text);

// The command the user ran: the innermost parsed subcommand of app (app itself if none).
const CLI::App& selected_command(const CLI::App& app);
// A library error in the words of this command's user: every option the library names
// (Error::fields(): "seq_len", "checkpoint.dir") is replaced by the flag that sets it
// ("--seq-len", "--checkpoint-dir") where the command (or a parent) has that flag.
std::string error_message(const Error& e, const CLI::App& command);

void register_info(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_bench(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_bench_train(CLI::App* bench, GlobalOptions& g,
                          std::vector<Command>& commands);  // `bench train`
void register_train(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_compare(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_sample(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_memory(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_report(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
void register_numerics(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);
// The precision advice (train/numerics_advice.h) as text lines on stdout, or as JSON to json_path
// ("-": stdout); `numerics --advise` and `finetune --advise` print it.
void print_numerics_advice(const NumericsAdvice& a, const std::string& json_path);
void register_finetune(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);  // and classify
void register_quantize(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);  // and evaluate
void register_tokenizer(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands);

// Bytes in MiB (2^20), for the commands' tables.
inline double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace mixtrain::cli
