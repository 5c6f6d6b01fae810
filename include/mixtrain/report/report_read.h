// What reading a report's inputs found besides the runs (mixtrain/report/html_report.h).
#pragma once
#include <string>
#include <vector>

namespace mixtrain {

// Every file read (for an output check) and a warning line for what was read but incomplete (a
// missing step log, an event file cut at a corrupt record).
struct ReportRead {
  std::vector<std::string> files;
  std::vector<std::string> warnings;
};

}  // namespace mixtrain
