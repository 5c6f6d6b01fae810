// Dims: fixed-capacity shape/stride lists.
#include "mixtrain/tensor/shape.h"

#include <limits>

#include "mixtrain/core/error.h"

namespace mixtrain {

Dims::Dims(std::initializer_list<int64_t> d) {
  for (int64_t v : d) push_back(v);
}

void Dims::push_back(int64_t v) {
  if (n_ >= kMaxDims) throw ShapeError("shape: more than " + std::to_string(kMaxDims) + " dimensions");
  d_[static_cast<size_t>(n_++)] = v;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) {
    const int64_t e = d_[static_cast<size_t>(i)];
    if (e < 0) throw ShapeError("shape " + to_string() + ": negative extent");
    if (e != 0 && n > std::numeric_limits<int64_t>::max() / e)
      throw ShapeError("shape " + to_string() + ": element count overflows int64");
    n *= e;
  }
  return n;
}

std::string Dims::to_string() const {
  std::string s = "(";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[static_cast<size_t>(i)]);
  }
  return s + ")";
}

bool operator==(const Dims& a, const Dims& b) {
  if (a.n_ != b.n_) return false;
  for (int i = 0; i < a.n_; ++i)
    if (a.d_[static_cast<size_t>(i)] != b.d_[static_cast<size_t>(i)]) return false;
  return true;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s;
  for (int i = 0; i < shape.size(); ++i) s.push_back(0);
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return s;
}

}  // namespace mixtrain
