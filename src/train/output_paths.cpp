// Output paths checked before a run, and checked writes (train/output_paths.h).
#include "mixtrain/train/output_paths.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/file_io.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/text_corpus.h"
#include "mixtrain/train/train_options.h"

namespace mixtrain {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }

// stat() following symlinks; nullopt when the path (or its target) does not exist.
std::optional<struct stat> stat_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return st;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The absolute path with every symlink resolved (the missing tail kept as written).
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

// `p` lies in what the checkpoint code owns under `dir` (both resolved): everything when `dir` is
// one checkpoint (it holds manifest.json), else a checkpoint (step-*, abandoned-step-*), a hidden
// one being written (.step-*) or the lock file. Other files beside the checkpoints (a run's log)
// are the user's.
bool inside_checkpoint(const fs::path& p, const fs::path& dir) {
  auto d = dir.begin(), q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (d->empty()) continue;  // a trailing slash
    if (q == p.end() || *q != *d) return false;
  }
  std::error_code ec;
  if (fs::exists(dir / "manifest.json", ec)) return true;
  if (q == p.end()) return true;  // the directory itself
  const std::string first = q->string();
  return first.starts_with("step-") || first.starts_with(".step-") || first.starts_with("abandoned-step-") ||
         first == ".lock";
}

// The name of a directory a checkpoint directory's code writes: step-NNNNNN, .step-NNNNNN (being
// written), abandoned-step-NNNNNN.
bool checkpoint_name(const std::string& name) {
  std::string_view n = name;
  if (n.starts_with("."))
    n.remove_prefix(1);
  else if (n.starts_with("abandoned-"))
    n.remove_prefix(10);
  if (!n.starts_with("step-") || n.size() == 5) return false;
  n.remove_prefix(5);
  return std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// `dir` holds a checkpoint: its manifest.json names the checkpoint format (checkpoint_dir.cpp).
bool is_checkpoint(const fs::path& dir) {
  std::error_code ec;
  const fs::path manifest = dir / "manifest.json";
  if (!fs::is_regular_file(manifest, ec)) return false;
  std::FILE* f = std::fopen(manifest.c_str(), "rb");
  if (f == nullptr) return false;
  char head[4096];
  const size_t n = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  return std::string_view(head, n).find("\"mixtrain-checkpoint\"") != std::string_view::npos;
}

// The checkpoint `p` (resolved) lies in, itself or an ancestor: a directory that holds a checkpoint
// or is named as one; empty when none. Any run that saves or resumes it reads, replaces and
// deletes its files, so no output of any run may lie there.
fs::path enclosing_checkpoint(const fs::path& p) {
  for (fs::path a = p; !a.empty(); a = a.parent_path()) {
    if (checkpoint_name(a.filename().string()) || is_checkpoint(a)) return a;
    if (a == a.root_path()) break;
  }
  return {};
}

void check_not_in_checkpoint(const RunPaths::Entry& out, bool is_dir) {
  if (out.path == "-") return;
  const fs::path r = resolved(out.path);
  const fs::path c = enclosing_checkpoint(is_dir ? r : r.parent_path());
  if (c.empty()) return;
  throw ArgumentError({out.what}, out.what + ": " + out.path + " is inside a checkpoint (" + c.string() +
                                      "), whose files the runs that save or resume it replace and delete");
}

// A log another process holds the lock of (OutputStream): found before the run loads anything.
bool locked_by_another(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return locked;
}

void check_output_file(const RunPaths::Entry& out) {
  check_nonempty_path(out.path, out.what);
  if (out.path == "-") return;
  if (const auto st = stat_of(out.path)) {
    if (S_ISDIR(st->st_mode))
      throw ArgumentError({out.what}, out.what + ": " + out.path + " is a directory, not a file");
    if (::access(out.path.c_str(), W_OK) != 0)
      throw ArgumentError({out.what}, out.what + ": " + out.path + " is not writable: " + errno_text());
    if (S_ISREG(st->st_mode) && locked_by_another(out.path))
      throw ArgumentError({out.what},
                          out.what + ": " + out.path + " is being written by another run (it is locked)");
    return;
  }
  const fs::path parent = resolved(out.path).parent_path();
  const auto pst = stat_of(parent.string());
  if (!pst)
    throw ArgumentError({out.what}, out.what + ": cannot create " + out.path + ": directory " +
                                        parent.string() + " does not exist");
  if (!S_ISDIR(pst->st_mode))
    throw ArgumentError({out.what}, out.what + ": cannot create " + out.path + ": " + parent.string() +
                                        " is not a directory");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw ArgumentError({out.what}, out.what + ": cannot create " + out.path + ": directory " +
                                        parent.string() + " is not writable: " + errno_text());
}

}  // namespace

void check_nonempty_path(const std::string& path, const std::string& what) {
  if (path.empty()) throw ArgumentError({what}, what + ": empty path");
}

void check_run_paths(const RunPaths& p) {
  for (const auto& out : p.outputs) check_output_file(out);
  for (const auto& d : p.output_dirs) {
    check_nonempty_path(d.path, d.what);
    if (const auto st = stat_of(d.path); st && !S_ISDIR(st->st_mode))
      throw ArgumentError({d.what}, d.what + ": " + d.path + " exists and is not a directory");
  }
  // Directories whose files the run reads or replaces: no output file may lie inside them.
  std::vector<RunPaths::Entry> dirs = p.input_dirs;
  dirs.insert(dirs.end(), p.output_dirs.begin(), p.output_dirs.end());
  for (const auto& in : p.inputs)
    if (const auto st = stat_of(in.path); st && S_ISDIR(st->st_mode)) dirs.push_back(in);
  // An output directory inside what another's checkpoint code owns (--tensorboard DIR/step-000010,
  // which a save's rename would replace); the same directory is fine (the files beside the
  // checkpoints are the user's).
  for (const auto& out : p.output_dirs) {
    const fs::path o = resolved(out.path);
    for (const auto& d : dirs) {
      const fs::path r = resolved(d.path);
      if (!d.path.empty() && o != r && inside_checkpoint(o, r))
        throw ArgumentError({out.what, d.what}, out.what + ": " + out.path + " is inside a checkpoint of " +
                                                    d.what + " " + d.path +
                                                    ", whose files the run reads, replaces and deletes");
    }
  }
  for (const auto& out : p.outputs) check_not_in_checkpoint(out, /*is_dir=*/false);
  for (const auto& out : p.output_dirs) check_not_in_checkpoint(out, /*is_dir=*/true);
  for (const auto& out : p.outputs) {
    if (out.path == "-") continue;
    const fs::path o = resolved(out.path);
    const auto ost = stat_of(out.path);
    for (const auto& d : dirs)
      if (!d.path.empty() && inside_checkpoint(o, resolved(d.path)))
        throw ArgumentError({out.what, d.what}, out.what + ": " + out.path + " is inside a checkpoint of " +
                                                    d.what + " " + d.path +
                                                    ", whose files the run reads, replaces and deletes");
    if (ost && S_ISREG(ost->st_mode))
      for (const auto& in : p.inputs)
        if (const auto ist = stat_of(in.path); ist && same_file(*ost, *ist))
          throw ArgumentError({out.what, in.what}, out.what + ": " + out.path + " is the same file as the " +
                                                       in.what + " input " + in.path +
                                                       "; writing it would destroy the input");
  }
  // Two outputs on one file would interleave or replace each other.
  for (size_t i = 0; i < p.outputs.size(); ++i)
    for (size_t j = i + 1; j < p.outputs.size(); ++j) {
      const auto& a = p.outputs[i];
      const auto& b = p.outputs[j];
      if (a.path == "-" || b.path == "-") {
        if (a.path == b.path)
          throw ArgumentError({a.what, b.what}, a.what + " and " + b.what + " both write to stdout");
        continue;
      }
      const auto sa = stat_of(a.path), sb = stat_of(b.path);
      const bool regular = !sa || S_ISREG(sa->st_mode);  // /dev/null may take several outputs
      if (regular && ((sa && sb && same_file(*sa, *sb)) || resolved(a.path) == resolved(b.path)))
        throw ArgumentError({a.what, b.what}, a.what + " and " + b.what + " name the same file " + a.path);
    }
  for (const auto& f : p.new_files) {
    const auto st = stat_of(f.path);
    if (st && S_ISREG(st->st_mode))
      throw ArgumentError({f.what, "overwrite", "checkpoint.resume"},
                          f.what + ": " + f.path +
                              " already exists (overwrite replaces it; checkpoint.resume continues its run)");
  }
}

std::vector<RunPaths::Entry> lm_input_paths(const LmOptions& o) {
  std::vector<RunPaths::Entry> lm;
  // Named as LmOptions spells them; the CLI says its flags (Error::fields()).
  if (!o.data.empty() && o.data != "-") lm.push_back({"data", o.data});
  if (o.model.size() > 5 && o.model.ends_with(".json")) lm.push_back({"model", o.model});
  if (!o.tokenizer.empty()) lm.push_back({"tokenizer", o.tokenizer});
  return lm;
}

RunPaths train_run_paths(const TrainOptions& o) { return run_paths(o, lm_input_paths(o)); }

RunPaths run_paths(const RunOptions& o, const std::vector<RunPaths::Entry>& task_inputs) {
  RunPaths p;
  p.inputs = task_inputs;
  const CheckpointOptions& c = o.checkpoint;
  if (!c.init_from.empty()) p.inputs.push_back({"checkpoint.init_from", c.init_from});
  if (!c.resume.empty()) {
    p.inputs.push_back({"checkpoint.resume", c.resume});
    p.input_dirs.push_back({"checkpoint.resume", c.resume});
  }
  if (!c.dir.empty()) p.output_dirs.push_back({"checkpoint.dir", c.dir});
  if (!o.tensorboard_dir.empty()) p.output_dirs.push_back({"tensorboard_dir", o.tensorboard_dir});
  // The logs: an existing one is continued by a resumed run, replaced only with overwrite.
  auto log = [&](const std::string& what, const std::string& path) {
    if (path.empty()) return;
    p.outputs.push_back({what, path});
    if (!o.overwrite && c.resume.empty() && path != "-") p.new_files.push_back({what, path});
  };
  log("numerics.path", o.numerics.path);
  log("log_jsonl", o.log_jsonl);
  return p;
}

OutputStream::OutputStream(std::string path, std::string what, bool append)
    : path_(std::move(path)), what_(std::move(what)) {
  if (path_ == "-") {
    std::fflush(stdout);  // what the program printed before comes first
    fd_ = STDOUT_FILENO;
    return;
  }
  const auto st = stat_of(path_);
  const bool regular = !st || S_ISREG(st->st_mode);  // devices, FIFOs: written as they are
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (regular && append ? O_APPEND : 0), 0644);
  if (fd_ < 0) fail(errno_text());
  owned_ = true;
  if (!regular) return;
  // One writer per log: locked before it is truncated, so a second run (even with --overwrite)
  // cannot tear or empty the log of a run still writing it. The kernel drops the lock at exit.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    fail(errno == EWOULDBLOCK ? "another run is writing it (it is locked)"
                              : "cannot lock it: " + errno_text());
  if (!append && ::ftruncate(fd_, 0) != 0) fail(errno_text());
}

OutputStream::~OutputStream() {
  if (owned_ && fd_ >= 0) ::close(fd_);
}

void OutputStream::fail(const std::string& why) const {
  throw IoError("cannot write " + what_ + " " + path_ + ": " + why);
}

void OutputStream::write(std::string_view text) {
  if (fd_ < 0) fail("already closed");
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void OutputStream::close() {
  if (!owned_ || fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed: " + errno_text());
}

void write_output_file(const std::string& path, const std::string& text, const std::string& what) {
  check_nonempty_path(path, what);
  const auto st = stat_of(path);
  if (path == "-" || (st && !S_ISREG(st->st_mode))) {
    if (st && S_ISDIR(st->st_mode)) throw IoError("cannot write " + what + " " + path + ": is a directory");
    OutputStream out(path, what, /*append=*/false);
    out.write(text);
    out.close();
    return;
  }
  // A regular file, new or existing: replaced whole, at the symlink's target (the link stays).
  try {
    write_file_durable(resolved(path).string(), text.data(), text.size());
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
}

}  // namespace mixtrain
