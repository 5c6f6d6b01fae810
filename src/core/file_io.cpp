// Durable writes (temp file + fsync + rename + directory fsync) and bounded reads.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Writes everything, retrying short writes and EINTR.
bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open directory " + dir + " to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw IoError("cannot sync directory " + dir + ": " + why);
}

void write_file_durable(const std::string& path, const void* data, size_t n) {
  write_file_durable(path, std::vector<FilePart>{{data, n}});
}

void write_file_durable(const std::string& path, const std::vector<FilePart>& parts) {
  const std::filesystem::path target(path);
  // The temporary file beside the target, under a name nobody can predict, created new
  // (mkostemp: O_CREAT | O_EXCL, so never through a link or over a file planted there).
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    throw IoError("cannot write " + path + ": cannot create a temporary file beside it: " + errno_text());
  bool ok = true;
  std::string why;
  if (::fchmod(fd, 0644) != 0) {  // mkostemp makes it 0600; the files written are 0644
    ok = false;
    why = "chmod failed: " + errno_text();
  } else {
    for (const FilePart& part : parts) {
      if (!write_all(fd, part.data, part.size)) {
        ok = false;
        why = "write failed: " + errno_text();
        break;
      }
    }
  }
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    why = "fsync failed: " + errno_text();
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = "close failed: " + errno_text();
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    why = "rename failed: " + errno_text();
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + why);
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  fsync_directory(dir);
}

void copy_present_files(const std::string& from_dir, const std::string& to_dir,
                        const std::vector<std::string>& names, uint64_t max_bytes, const std::string& what) {
  if (from_dir.empty()) return;
  std::error_code ec;
  for (const std::string& name : names) {
    const std::filesystem::path src = std::filesystem::path(from_dir) / name;
    if (!std::filesystem::is_regular_file(src, ec)) continue;
    const std::vector<uint8_t> bytes = read_file_bounded(src.string(), max_bytes, what);
    write_file_durable((std::filesystem::path(to_dir) / name).string(), bytes.data(), bytes.size());
  }
}

std::vector<uint8_t> read_file_bounded(const std::string& path, uint64_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO planted where a file should be must not hang (the S_ISREG check
  // below then refuses it); it changes nothing for regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IoError("cannot read " + what + " " + path + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("cannot read " + what + " " + path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    throw IoError(what + " " + path + " is too large (" + std::to_string(size) + " bytes, limit " +
                  std::to_string(max_bytes) + ")");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r < 0 ? errno_text() : "file shrank while reading";
      ::close(fd);
      throw IoError("cannot read " + what + " " + path + ": " + why);
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return bytes;
}

}  // namespace mixtrain
