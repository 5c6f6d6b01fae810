// TensorBoard event files (train/event_file.h): Event / Summary messages (proto/, compiled by
// protoc into the build) framed as TFRecords.
#include "train/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/file_io.h"
#include "core/printable.h"
#include "event.pb.h"
#include "mixtrain/core/error.h"
#include "train/tfrecord.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kPrefix = "events.out.tfevents.";
constexpr uint64_t kMaxEventFileBytes = uint64_t{1} << 32;

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The <seconds> of events.out.tfevents.<seconds>.*; -1 when it is not a number.
int64_t file_seconds(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const size_t start = kPrefix.size();
  size_t end = start;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == start || end - start > 15) return -1;
  return std::stoll(name.substr(start, end - start));
}

std::string serialize(const tensorboard::Event& e) {
  std::string bytes;
  if (!e.SerializeToString(&bytes)) throw IoError("cannot encode a TensorBoard event");
  return bytes;
}

std::string read_whole(const std::string& path) {
  const std::vector<uint8_t> b = read_file_bounded(path, kMaxEventFileBytes, "event file");
  return std::string(b.begin(), b.end());
}

}  // namespace

std::vector<std::string> list_event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 && entry.is_regular_file(ec)) files.push_back(entry.path().string());
  }
  if (ec) throw IoError("cannot list " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw IoError("cannot create TensorBoard directory " + dir + ": " + ec.message());
  int64_t seconds = static_cast<int64_t>(wall_seconds());
  for (const std::string& f : list_event_files(dir)) seconds = std::max(seconds, file_seconds(f) + 1);
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  path_ = (fs::path(dir) /
           (std::string(kPrefix) + std::to_string(seconds) + "." + host + "." + std::to_string(getpid())))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create event file " + path_ + ": " + std::strerror(errno));
  tensorboard::Event e;
  e.set_wall_time(wall_seconds());
  e.set_file_version("brain.Event:2");
  append(tfrecord_frame(serialize(e)));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::append(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError("cannot write event file " + path_ + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

void EventFileWriter::write(const ScalarEvent& s) {
  tensorboard::Event e;
  e.set_wall_time(s.wall_time > 0 ? s.wall_time : wall_seconds());
  e.set_step(s.step);
  tensorboard::Summary* sum = e.mutable_summary();
  for (const auto& [tag, value] : s.values) {
    tensorboard::Summary::Value* v = sum->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  append(tfrecord_frame(serialize(e)));
}

int64_t trim_event_files(const std::string& dir, int64_t step) {
  int64_t dropped = 0;
  for (const std::string& path : list_event_files(dir)) {
    const std::string bytes = read_whole(path);
    size_t valid = 0;
    const std::vector<std::string> records = tfrecord_parse(bytes, &valid);
    std::string kept;
    bool any_scalar = false;
    int64_t file_dropped = valid < bytes.size() ? 1 : 0;  // a torn tail counts as one record
    for (const std::string& r : records) {
      tensorboard::Event e;
      if (!e.ParseFromString(r))
        throw IoError("event file " + path + ": a record is not a TensorBoard Event");
      if (e.has_summary() && e.step() > step) {
        ++file_dropped;
        continue;
      }
      any_scalar = any_scalar || e.has_summary();
      kept += tfrecord_frame(r);
    }
    dropped += file_dropped;
    if (!any_scalar) {
      std::error_code ec;
      fs::remove(path, ec);
      if (ec) throw IoError("cannot remove event file " + path + ": " + ec.message());
    } else if (file_dropped > 0) {
      write_file_durable(path, kept);
    }
  }
  return dropped;
}

std::vector<ScalarEvent> read_scalar_events(const std::string& dir, std::vector<std::string>* warnings) {
  std::vector<ScalarEvent> out;
  for (const std::string& path : list_event_files(dir)) {
    const std::string bytes = read_whole(path);
    size_t valid = 0;
    const std::vector<std::string> records = tfrecord_parse(bytes, &valid);
    if (valid < bytes.size() && warnings != nullptr)
      warnings->push_back("event file " + printable(path, 200) + ": the record at byte " +
                          std::to_string(valid) +
                          " is corrupt or torn (its length or CRC does not match): the " +
                          std::to_string(bytes.size() - valid) + " bytes from there are dropped, the " +
                          std::to_string(records.size()) + " records before it kept");
    for (const std::string& r : records) {
      tensorboard::Event e;
      if (!e.ParseFromString(r))
        throw IoError("event file " + path + ": a record is not a TensorBoard Event");
      if (!e.has_summary()) continue;
      ScalarEvent s;
      s.step = e.step();
      s.wall_time = e.wall_time();
      for (const auto& v : e.summary().value())
        if (v.has_simple_value()) s.values.emplace_back(v.tag(), v.simple_value());
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace mixtrain
