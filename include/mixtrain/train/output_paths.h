// Where a run writes, checked before it trains, and how it writes there. A run must never destroy
// its inputs or throw its work away at the end because an output cannot be written, so every
// output path is checked up front: not a directory where a file is meant, writable (or its
// directory is), not the same file as any input or other output (device and inode, after
// symlinks), not inside a checkpoint (step-NNNNNN/ and the other names a checkpoint directory's
// code owns, and any directory holding a checkpoint's manifest, this run's or another's: its files
// are read, replaced and deleted by the runs that save and resume it), not a log another run is
// writing (locked).
//
// Writing follows what the path is: "-" is stdout; a regular file (or a new one) is replaced
// atomically (temporary file + rename, at the symlink's target when the path is a symlink);
// a device or FIFO is written through. Every write and close is checked.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixtrain {

struct RunOptions;
struct LmOptions;
struct TrainOptions;

// The paths of one run. `what` names each path as the options spell it ("log_jsonl",
// "checkpoint.dir"); errors list it in Error::fields(), so the CLI can say its flag.
struct RunPaths {
  struct Entry {
    std::string what;
    std::string path;
  };
  std::vector<Entry> inputs;       // files or directories the run reads
  std::vector<Entry> input_dirs;   // directories whose files the run reads (a resumed checkpoint)
  std::vector<Entry> outputs;      // files the run writes
  std::vector<Entry> output_dirs;  // directories the run writes into (--checkpoint-dir)
  std::vector<Entry> new_files;    // outputs that must not exist yet (a fresh step or numerics log)
};

// ArgumentError / IoError naming the flag and the path for the first problem.
void check_run_paths(const RunPaths& p);

// What a run of `o` reads and writes: the task's inputs (first, in order), init_from and resume as
// inputs; the step log, the numerics log, the checkpoint and TensorBoard directories as outputs
// (the logs must be new unless overwrite or checkpoint.resume).
RunPaths run_paths(const RunOptions& o, const std::vector<RunPaths::Entry>& task_inputs = {});
// Language-model pre-training's inputs: the data (not stdin) and a model config file.
std::vector<RunPaths::Entry> lm_input_paths(const LmOptions& o);
// train(o)'s: run_paths with lm_input_paths as the task's inputs.
RunPaths train_run_paths(const TrainOptions& o);

// A file opened for streaming output (the step log): "-" is stdout; otherwise opened for writing
// at the symlink's target (appending or truncating), devices and FIFOs written through. A regular
// file is locked (flock) first and truncated after: a second writer fails ("another run is
// writing it") instead of tearing the log. Every
// write is checked: IoError "cannot write <what> <path>: <reason>".
class OutputStream {
 public:
  OutputStream(std::string path, std::string what, bool append);
  ~OutputStream();
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;
  void write(std::string_view text);
  void close();  // checked; the destructor closes unchecked

 private:
  [[noreturn]] void fail(const std::string& why) const;
  std::string path_, what_;
  int fd_ = -1;
  bool owned_ = false;  // not stdout
};

// Writes `text` to `path` whole: stdout for "-", through a device or FIFO, else an atomic replace
// of the regular file (at the symlink's target). IoError naming `what` and the path.
void write_output_file(const std::string& path, const std::string& text, const std::string& what);

// Refuses a path that makes no sense as a file name (empty), naming the flag.
void check_nonempty_path(const std::string& path, const std::string& what);

}  // namespace mixtrain
