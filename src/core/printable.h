// Text from untrusted input (names in hostile files, paths) made safe to quote in a one-line
// message.
#pragma once
#include <cstddef>
#include <string>

namespace mixtrain {

// `s` with bytes outside printable ASCII (and the backslash) as \xNN, cut to max_len characters
// with "...".
std::string printable(const std::string& s, size_t max_len = 80);

}  // namespace mixtrain
