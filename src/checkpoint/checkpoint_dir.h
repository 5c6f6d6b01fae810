// Checkpoint directories: DIR/step-000020/ holds the files of one checkpoint and a
// manifest.json listing each file's size and CRC-32. A checkpoint is built in a hidden
// DIR/.step-000020.tmp/ (every file written durably, the manifest last), then renamed into place
// and DIR fsync'ed, so step-NNNNNN/ exists only complete. Loading re-checks every size and
// checksum; a checkpoint that fails is skipped with a reason and the one before it is used.
//
// manifest.json: {"format": "mixtrain-checkpoint", "version": 1, "step": 20,
//                 "info": {...caller's JSON...},
//                 "files": {"model.safetensors": {"bytes": N, "crc32": "1a2b3c4d"}, ...},
//                 "checksum": CRC-32 of this JSON dumped without "checksum"}
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mixtrain {

constexpr const char* kManifestName = "manifest.json";

struct CheckpointFile {
  std::string name;  // plain file name, no '/'
  std::vector<uint8_t> bytes;
};

// Writes DIR/step-<step, 6 digits>/ as above (creating DIR), replacing an existing checkpoint of
// that step, and removes stale temporary directories of killed runs. Returns the final path.
std::string write_checkpoint(const std::string& dir, int64_t step, const std::vector<CheckpointFile>& files,
                             const nlohmann::ordered_json& info);

struct LoadedCheckpoint {
  std::string path;
  int64_t step = 0;
  nlohmann::json info;
  std::map<std::string, std::vector<uint8_t>> files;  // verified: size and CRC-32 match
};
// Reads a checkpoint directory and verifies its manifest and every file it lists. IoError (one
// line naming the path and the problem) when anything is missing, malformed or corrupt.
LoadedCheckpoint read_checkpoint(const std::string& path);

// step-NNNNNN subdirectories of dir (complete or not), ascending by step. Empty if dir is absent.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
// Keeps the `keep` newest checkpoints of dir (keep > 0), deleting the others (renamed to a
// hidden name first, so a crash mid-delete never leaves a step-NNNNNN/ that looks loadable).
void prune_checkpoints(const std::string& dir, int64_t keep);
// The checkpoint `path` designates: itself if it is one (a directory with manifest.json; any
// problem is an IoError), else the newest step-NNNNNN/ inside it that reads back verified and
// passes `check` (which throws Error for content it rejects). Each one skipped on the way is
// reported through `warn` ("skipping checkpoint PATH: reason"). nullopt when the directory holds
// no step-NNNNNN/ at all; IoError when path does not exist or every checkpoint in it is invalid
// (naming the newest and why).
std::optional<LoadedCheckpoint> resolve_checkpoint(const std::string& path,
                                                   const std::function<void(const LoadedCheckpoint&)>& check,
                                                   const std::function<void(const std::string&)>& warn);
// Whether path is one checkpoint (a directory holding manifest.json) rather than a directory of them.
bool is_single_checkpoint(const std::string& path);

}  // namespace mixtrain
