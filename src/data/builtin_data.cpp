// builtin_data_path: the lookup of the built-in data (see builtin_data.h).
#include "mixtrain/data/builtin_data.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "mixtrain/core/error.h"

namespace mixtrain {

namespace fs = std::filesystem;

std::string builtin_data_path(const std::string& relative) {
  const std::string hint = "; run scripts/setup.sh (it installs the built-in data into data/)";
  if (const char* dir = std::getenv("MIXTRAIN_DATA_DIR"); dir && *dir) {
    const std::string p = (fs::path(dir) / relative).string();
    std::error_code ec;
    if (fs::exists(p, ec)) return p;
    throw IoError("built-in data '" + p + "' (from MIXTRAIN_DATA_DIR) not found" + hint);
  }
  std::vector<std::string> tried;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    tried.push_back((exe.parent_path() / "data" / relative).string());  // build/
    tried.push_back(
        (exe.parent_path().parent_path() / "share" / "mixtrain" / relative).string());  // installed
  }
  tried.push_back((fs::path("build") / "data" / relative).string());
  for (const std::string& p : tried) {
    std::error_code ec2;
    if (fs::exists(p, ec2)) return p;
  }
  std::string where;
  for (const std::string& p : tried) where += (where.empty() ? "'" : ", '") + p + "'";
  throw IoError("built-in data '" + relative + "' not found (looked in " + where + ")" + hint);
}

}  // namespace mixtrain
