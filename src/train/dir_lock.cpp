// The checkpoint directory's lock (train/dir_lock.h).
#include "train/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mixtrain/core/error.h"

namespace mixtrain {

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError({what}, what + ": cannot create directory " + dir + ": " + ec.message());
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  // Never through a symbolic link (one planted at DIR/.lock would make the run truncate its
  // target) and only a regular file (O_NONBLOCK: a FIFO there must not hang the open).
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0 && errno == ELOOP)
    throw IoError({what}, what + ": the lock file " + path + " is a symbolic link: refused (remove it)");
  if (fd_ < 0)
    throw IoError({what}, what + ": cannot create the lock file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw IoError({what}, what + ": the lock file " + path + " is not a regular file: refused (remove it)");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw ArgumentError({what}, what + ": " + dir + " is in use by another run (pid " +
                                      (pid.empty() ? "unknown" : pid) + ")");
    throw IoError({what}, what + ": cannot lock " + path + ": " + std::strerror(err));
  }
  // Ours now: the pid for the message of a second run. A write that fails here (full file
  // system) would fail the first checkpoint too: found before training.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()) || ::fsync(fd_) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    throw IoError({what}, what + ": cannot write the lock file " + path + ": " + why);
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

}  // namespace mixtrain
