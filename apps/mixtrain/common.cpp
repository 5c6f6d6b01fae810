// Helpers shared by the subcommands.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "mixtrain/core/error.h"
#include "mixtrain/kernels/backend.h"

namespace mixtrain::cli {

void apply_global_options(const GlobalOptions& g) {
  if (g.threads > 0) set_num_threads(g.threads);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw IoError("cannot write " + path + ": cannot create " + tmp);
    f << text;
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw IoError("cannot write " + path + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw IoError("cannot write " + path + ": " + ec.message());
  }
}

}  // namespace mixtrain::cli
