// Ranks that were started differently (an MPMD command line, a typo on one host) must not train:
// with another --zero they deadlock in the first collective, with another --precision they abort
// with a raw MPI error, with another --lr or --seed they train divergent replicas without a word.
// So at start-up every rank hashes each option that shapes the trajectory (and the data), the
// ranks exchange the hashes, and on a mismatch every rank throws the same ArgumentError naming the
// first option that differs and the ranks that differ from rank 0.
//
//   check_ranks_agree(world, {{"command", "train"}});
//   check_ranks_agree(world, {{"lr", "0x1p-10"}, {"seed", "1337"}, {"data", hash}});
#pragma once
#include <string>
#include <vector>

#include "mixtrain/dist/communicator.h"

namespace mixtrain {

struct AgreedField {
  std::string name;   // as the options spell it ("lr", "data_parallel.zero_stage"): the error's field
  std::string value;  // any text that is equal on two ranks exactly when the option is
};

// A collective (every rank calls it with the same number of fields, or with different names, which
// is a mismatch too). ArgumentError({name}) "the ranks disagree on NAME: ..." on every rank.
void check_ranks_agree(Communicator& world, const std::vector<AgreedField>& fields);

// A number as text that two ranks share exactly when the numbers are equal (%.17g: every double,
// so every float, round-trips), for check_ranks_agree.
std::string agreed_number(double v);

// 64-bit FNV-1a of bytes, as 16 hex digits: a fingerprint of data for check_ranks_agree.
std::string fingerprint(const void* data, size_t bytes);

}  // namespace mixtrain
