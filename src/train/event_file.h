// TensorBoard event files (internal): writing Event records through the TFRecord framing
// (train/tfrecord.h), and reading them back for resuming and for `mixtrain report`.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mixtrain {

// The event files in `dir` (events.out.tfevents.*), sorted by name, which is TensorBoard's
// reading order. None when `dir` does not exist.
std::vector<std::string> list_event_files(const std::string& dir);

// One step's scalars.
struct ScalarEvent {
  int64_t step = 0;
  double wall_time = 0;
  std::vector<std::pair<std::string, float>> values;  // (tag, value)
};

// Appends events to a new event file; each write() is one write(2) of whole records, so a kill
// leaves at most a torn last record (which readers skip).
class EventFileWriter {
 public:
  // Creates `dir` if needed and DIR/events.out.tfevents.<seconds>.<host>.<pid>, with <seconds>
  // past every existing file's (the name sorts last), holding the file_version record. IoError
  // naming the path on failure.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;
  void write(const ScalarEvent& e);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& bytes);
  std::string path_;
  int fd_ = -1;
};

// Cuts every event file in `dir` back to its records of steps <= `step` (and the file_version
// record); a file left with no scalar is removed. Each file is rewritten crash-safely. Returns the
// number of records dropped.
int64_t trim_event_files(const std::string& dir, int64_t step);

// Every scalar in the event files of `dir`, in reading order: IoError naming a file that cannot
// be read or a record that is not an Event. A file whose records stop at a corrupt one (a CRC
// that does not match, a bogus length, a torn tail) keeps the records before it; `warnings`, when
// given, gets one line for it naming the file, the byte offset and the bytes dropped.
std::vector<ScalarEvent> read_scalar_events(const std::string& dir,
                                            std::vector<std::string>* warnings = nullptr);

}  // namespace mixtrain
