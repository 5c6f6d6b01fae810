// Checkpoint directories: atomic creation, verification, listing and pruning.
#include "checkpoint/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checksum.h"
#include "core/file_io.h"
#include "core/json_input.h"
#include "core/printable.h"
#include "mixtrain/core/error.h"

namespace fs = std::filesystem;

namespace mixtrain {
namespace {

constexpr const char* kManifestFormat = "mixtrain-checkpoint";
constexpr int64_t kManifestVersion = 1;
constexpr uint64_t kMaxManifest = 1 << 20;
constexpr uint64_t kMaxFile = uint64_t{1} << 36;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return buf;
}

// ".step-000020.tmp": the hidden names of directories being built, replaced or deleted.
std::string hidden_name(int64_t step, const char* suffix) {
  std::string s(".");
  s.append(step_name(step));
  s.append(suffix);
  return s;
}

// "step-000020" -> 20; -1 for anything else.
int64_t parse_step_name(const std::string& n) {
  if (n.size() < 6 || n.size() > 24 || n.compare(0, 5, "step-") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < n.size(); ++i) {
    if (n[i] < '0' || n[i] > '9') return -1;
    v = v * 10 + (n[i] - '0');
  }
  return v;
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw IoError("cannot remove " + p.string() + ": " + ec.message());
}

void rename_path(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw IoError("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
}

std::string manifest_checksum(const nlohmann::ordered_json& m) {
  const std::string text = m.dump();
  return crc32_hex(crc32(text.data(), text.size()));
}

}  // namespace

bool is_single_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::path(path) / kManifestName, ec);
}

std::string write_checkpoint(const std::string& dir, int64_t step, const std::vector<CheckpointFile>& files,
                             const nlohmann::ordered_json& info) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create checkpoint directory " + dir + ": " + ec.message());
  // Leftovers of killed runs: hidden .step-*.tmp / .old / .deleting directories.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind(".step-", 0) == 0) remove_tree(entry.path());
  }
  const std::string name = step_name(step);
  const fs::path tmp = fs::path(dir) / hidden_name(step, ".tmp");
  const fs::path final_path = fs::path(dir) / name;
  fs::create_directory(tmp, ec);
  if (ec) throw IoError("cannot create " + tmp.string() + ": " + ec.message());

  nlohmann::ordered_json manifest;
  manifest["format"] = kManifestFormat;
  manifest["version"] = kManifestVersion;
  manifest["step"] = step;
  manifest["info"] = info;
  nlohmann::ordered_json listed = nlohmann::ordered_json::object();
  for (const auto& f : files) {
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == kManifestName)
      throw ArgumentError("write_checkpoint: bad file name '" + f.name + "'");
    write_file_durable((tmp / f.name).string(), f.bytes.data(), f.bytes.size());
    listed[f.name] = {{"bytes", f.bytes.size()}, {"crc32", crc32_hex(crc32(f.bytes.data(), f.bytes.size()))}};
  }
  manifest["files"] = listed;
  manifest["checksum"] = manifest_checksum(manifest);
  write_file_durable((tmp / kManifestName).string(), manifest.dump(2) + "\n");

  // Into place: an existing checkpoint of the same step (a resumed run re-saving it) moves aside
  // first, so at every instant step-NNNNNN/ is either the old or the new complete checkpoint.
  const fs::path old = fs::path(dir) / hidden_name(step, ".old");
  const bool replacing = fs::exists(final_path, ec);
  if (replacing) rename_path(final_path, old);
  rename_path(tmp, final_path);
  fsync_directory(dir);
  if (replacing) remove_tree(old);
  return final_path.string();
}

LoadedCheckpoint read_checkpoint(const std::string& path) {
  LoadedCheckpoint out;
  out.path = path;
  const std::string mpath = (fs::path(path) / kManifestName).string();
  auto fail = [&](const std::string& problem) -> void {
    throw IoError("checkpoint " + path + ": " + problem);
  };
  std::error_code ec;
  if (!fs::is_directory(path, ec)) fail("not a directory");
  if (!fs::exists(mpath, ec)) fail("no manifest.json (incomplete checkpoint)");
  const std::vector<uint8_t> mbytes = read_file_bounded(mpath, kMaxManifest, "checkpoint manifest");
  nlohmann::ordered_json m = parse_untrusted_ordered_json(
      std::string_view(reinterpret_cast<const char*>(mbytes.data()), mbytes.size()),
      "checkpoint " + path + ": manifest.json");
  if (!m.is_object()) fail("manifest.json is not a JSON object");
  const auto cs = m.find("checksum");
  if (cs == m.end() || !cs->is_string()) fail("manifest.json has no checksum");
  const std::string stored = cs->get<std::string>();
  m.erase("checksum");
  if (manifest_checksum(m) != stored) fail("manifest.json checksum mismatch (corrupt)");
  if (!m.contains("format") || m["format"] != kManifestFormat)
    fail("manifest.json is not a mixtrain checkpoint manifest");
  if (!m.contains("version") || !m["version"].is_number_integer() ||
      m["version"].get<int64_t>() != kManifestVersion)
    fail("unsupported manifest version");
  if (!m.contains("step") || !m["step"].is_number_integer() || m["step"].get<int64_t>() < 0)
    fail("manifest 'step' must be a non-negative integer");
  out.step = m["step"].get<int64_t>();
  if (!m.contains("info") || !m["info"].is_object()) fail("manifest 'info' must be an object");
  out.info = nlohmann::json::parse(m["info"].dump());
  if (!m.contains("files") || !m["files"].is_object()) fail("manifest 'files' must be an object");
  for (const auto& [fname, entry] : m["files"].items()) {
    if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
      fail("manifest lists a bad file name '" + printable(fname) + "'");
    if (!entry.is_object() || !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("crc32") || !entry["crc32"].is_string())
      fail("manifest entry for " + printable(fname) + " must be {bytes, crc32}");
    const uint64_t want_bytes = entry["bytes"].get<uint64_t>();
    const std::string fpath = (fs::path(path) / fname).string();
    if (!fs::exists(fpath, ec)) fail(fname + " is missing");
    std::vector<uint8_t> bytes = read_file_bounded(fpath, kMaxFile, "checkpoint file");
    if (bytes.size() != want_bytes)
      fail(printable(fname) + " has " + std::to_string(bytes.size()) + " bytes, the manifest says " +
           std::to_string(want_bytes) + " (truncated or corrupt)");
    if (crc32_hex(crc32(bytes.data(), bytes.size())) != entry["crc32"].get<std::string>())
      fail(printable(fname) + " fails its CRC-32 check (corrupt)");
    out.files.emplace(fname, std::move(bytes));
  }
  return out;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t s = parse_step_name(entry.path().filename().string());
    if (s >= 0 && entry.is_directory(ec)) out.emplace_back(s, entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void prune_checkpoints(const std::string& dir, int64_t keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(dir);
  if (static_cast<int64_t>(all.size()) <= keep) return;
  all.resize(all.size() - static_cast<size_t>(keep));
  for (const auto& [step, path] : all) {
    const fs::path hidden = fs::path(dir) / hidden_name(step, ".deleting");
    remove_tree(hidden);
    rename_path(path, hidden);
  }
  fsync_directory(dir);
  for (const auto& [step, path] : all) remove_tree(fs::path(dir) / hidden_name(step, ".deleting"));
}

}  // namespace mixtrain

namespace mixtrain {

std::optional<LoadedCheckpoint> resolve_checkpoint(const std::string& path,
                                                   const std::function<void(const LoadedCheckpoint&)>& check,
                                                   const std::function<void(const std::string&)>& warn) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IoError("checkpoint " + path + ": no such file or directory");
  if (is_single_checkpoint(path)) {
    LoadedCheckpoint c = read_checkpoint(path);
    check(c);
    return c;
  }
  if (!fs::is_directory(path, ec)) throw IoError("checkpoint " + path + ": not a checkpoint directory");
  const auto all = list_checkpoints(path);
  if (all.empty()) return std::nullopt;
  std::string newest_problem;
  std::vector<std::string> skipped;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      LoadedCheckpoint c = read_checkpoint(it->second);
      check(c);
      for (const auto& s : skipped) warn(s);
      return c;
    } catch (const Error& e) {
      if (newest_problem.empty()) newest_problem = e.what();
      skipped.push_back(std::string("skipping invalid checkpoint: ") + e.what());
    }
  }
  throw IoError("no valid checkpoint in " + path + " (" + std::to_string(all.size()) +
                " found, all invalid; newest: " + newest_problem + ")");
}

}  // namespace mixtrain
