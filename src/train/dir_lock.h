// One run per checkpoint directory: an exclusive flock(2) on DIR/.lock, held for the run's
// lifetime. The kernel drops it when the process ends, even by kill -9, so a crashed run never
// leaves a stale lock; the file holds the holder's pid for the message a second run prints.
#pragma once
#include <string>

namespace mixtrain {

class DirectoryLock {
 public:
  DirectoryLock() = default;
  // Creates `dir` if needed and locks it. ArgumentError naming `what` (the flag) when another
  // process holds the lock (with its pid), IoError when the directory cannot be created or the
  // lock file written (a file in the way, read-only or full file system, /proc).
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirectoryLock& operator=(DirectoryLock&& o) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace mixtrain
