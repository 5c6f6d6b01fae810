// Typed exceptions. Every error mixtrain raises is one of these, with a one-line message that
// names the op (or file) and the offending shapes/values; the CLI prints it and exits 2.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mixtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // An error about options or arguments of the C++ API: the message names each the way the code
  // spells it ("seq_len must be positive", "checkpoint.keep needs checkpoint.dir"), and fields()
  // lists those names, so a front end can say them in its own terms (the CLI names its flags:
  // "--seq-len must be positive"). The library never names a CLI flag itself.
  Error(std::vector<std::string> fields, const std::string& what)
      : std::runtime_error(what), fields_(std::move(fields)) {}
  const std::vector<std::string>& fields() const { return fields_; }

 private:
  std::vector<std::string> fields_;
};
// Incompatible or impossible shapes (also sizes whose byte count overflows).
class ShapeError : public Error {
 public:
  using Error::Error;
};
// A dtype the op does not accept, or two inputs whose dtypes do not match.
class DTypeError : public Error {
 public:
  using Error::Error;
};
// Any other bad argument: null or misaligned data, an index out of range, a bad option value.
class ArgumentError : public Error {
 public:
  using Error::Error;
};
// A file that is missing, unreadable, malformed or corrupt.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace mixtrain
