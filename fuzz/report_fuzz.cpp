// libFuzzer target: the report's readers (report/report.h), on any bytes written to a file the way
// a user hands them over: the first byte picks a compare JSON or step log (one file), or a
// TensorBoard event file (a directory holding it). The report model must build and render, or
// throw mixtrain::Error; a deep or hostile JSON text must not crash it (it did: issue 31).
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_init.h"
#include "mixtrain/core/error.h"
#include "report/report.h"

namespace {

// A directory of this process's own for the input files (removed by the OS's tmp cleaning).
const std::string& work_dir() {
  static const std::string dir = [] {
    char t[] = "/tmp/mixtrain-report-fuzz-XXXXXX";
    if (mkdtemp(t) == nullptr) abort();
    const std::string d(t);
    if (::mkdir((d + "/tb").c_str(), 0700) != 0) abort();
    return d;
  }();
  return dir;
}

void write(const std::string& path, const uint8_t* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, n, f) != n || std::fclose(f) != 0) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool events = (data[0] & 1) != 0;
  const std::string& dir = work_dir();
  const std::string file = events ? dir + "/tb/events.out.tfevents.1700000000.fuzz" : dir + "/input.json";
  write(file, data + 1, size - 1);
  try {
    mixtrain::ReportRead read;
    const nlohmann::ordered_json r = mixtrain::report_from_inputs({events ? dir + "/tb" : file}, &read);
    (void)mixtrain::render_report_html(r);
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
