// Typed exceptions. Every error mixtrain raises is one of these, with a one-line message that
// names the op (or file) and the offending shapes/values; the CLI prints it and exits 2.
#pragma once
#include <stdexcept>
#include <string>

namespace mixtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
