// Crash-safe file writes and bounded file reads: every file the library writes whole (checkpoints,
// tokenizer files, token files, reports, logs' configs). A write goes to a temporary
// file in the same directory, is fsync'ed, renamed over the target and the directory fsync'ed:
// after a crash (kill -9, power loss) the target is either the old file or the complete new one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mixtrain {

// Writes n bytes to `path` atomically as above. IoError (naming path) on any failure; the
// temporary file is removed then and the target left as it was.
void write_file_durable(const std::string& path, const void* data, size_t n);
// The same for a file made of parts, written one after another (a header, then a payload).
struct FilePart {
  const void* data;
  size_t size;
};
void write_file_durable(const std::string& path, const std::vector<FilePart>& parts);
inline void write_file_durable(const std::string& path, const std::string& text) {
  write_file_durable(path, text.data(), text.size());
}
// Copies each of `names` that is a regular file in from_dir into to_dir (write_file_durable;
// each read bounded by max_bytes, IoError naming it as `what`); an empty from_dir copies nothing.
// A saved model's tokenizer files travel this way.
void copy_present_files(const std::string& from_dir, const std::string& to_dir,
                        const std::vector<std::string>& names, uint64_t max_bytes, const std::string& what);
// fsync of a directory (makes renames and creations inside it durable). IoError on failure.
void fsync_directory(const std::string& dir);

// Reads a whole regular file. IoError "<what> <path>: ..." when it is missing, not a regular
// file, unreadable, or larger than max_bytes (checked before anything is allocated).
std::vector<uint8_t> read_file_bounded(const std::string& path, uint64_t max_bytes, const std::string& what);

}  // namespace mixtrain
