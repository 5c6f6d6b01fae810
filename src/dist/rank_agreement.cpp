// The ranks' start-up agreement on their options (dist/rank_agreement.h).
#include "mixtrain/dist/rank_agreement.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "mixtrain/core/error.h"

namespace mixtrain {
namespace {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  h = fnv1a(s.data(), s.size(), h);
  return fnv1a("\0", 1, h);  // "ab","c" and "a","bc" differ
}

// Every rank's `mine`, in rank order (all_gather of one value each).
std::vector<uint64_t> gather_all(Communicator& world, const std::vector<uint64_t>& mine) {
  const int n = world.size();
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(n));
  std::memcpy(all.data() + mine.size() * static_cast<size_t>(world.rank()), mine.data(), mine.size() * 8);
  world.all_gather(all.data(),
                   std::vector<int64_t>(static_cast<size_t>(n), static_cast<int64_t>(mine.size() * 8)));
  return all;
}

// "1", "1 and 3", "1, 2 and 5".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

// "rank 1 differs", "ranks 1 and 3 differ".
std::string ranks_differ(const std::vector<int>& ranks) {
  return (ranks.size() > 1 ? "ranks " : "rank ") + rank_list(ranks) +
         (ranks.size() > 1 ? " differ" : " differs");
}

// The ranks whose value `v` at `index` differs from rank 0's (all: `per_rank` values a rank).
std::vector<int> differing(const std::vector<uint64_t>& all, size_t per_rank, size_t index, int ranks) {
  std::vector<int> out;
  for (int r = 1; r < ranks; ++r)
    if (all[static_cast<size_t>(r) * per_rank + index] != all[index]) out.push_back(r);
  return out;
}

}  // namespace

std::string agreed_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string fingerprint(const void* data, size_t bytes) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(data, bytes)));
  return buf;
}

void check_ranks_agree(Communicator& world, const std::vector<AgreedField>& fields) {
  if (world.size() <= 1) return;
  // Equal on every rank when max == min (two all-reduces of one value: the same calls on every
  // rank whatever the values); only on a mismatch, which every rank sees, the values are gathered
  // to name the ranks.
  const auto agree = [&](uint64_t h) {
    const auto v = static_cast<int64_t>(h >> 2);  // 62 bits: -v cannot overflow
    return world.max(v) == -world.max(-v);
  };
  const auto who = [&](uint64_t h) { return differing(gather_all(world, {h >> 2}), 1, 0, world.size()); };
  // First the list itself (how many fields, which names): the per-field calls must pair up.
  uint64_t names = fnv1a(std::to_string(fields.size()), 0xcbf29ce484222325ull);
  for (const AgreedField& f : fields) names = fnv1a(f.name, names);
  if (!agree(names))
    throw ArgumentError(
        "the ranks were started with different commands or tasks: " + ranks_differ(who(names)) +
        " from rank 0; start every rank with the same command line");
  for (const AgreedField& f : fields) {
    const uint64_t h = fnv1a(f.value, fnv1a(f.name, 0x84222325cbf29ce4ull));
    if (agree(h)) continue;
    throw ArgumentError({f.name}, "the ranks disagree on " + f.name + ": " + ranks_differ(who(h)) +
                                      " from rank 0 (this rank, " + std::to_string(world.rank()) + ", has " +
                                      f.value + "); start every rank with the same options and data");
  }
}

}  // namespace mixtrain
