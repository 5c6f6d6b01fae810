// Shape and strides: a small fixed-capacity list of extents (no heap allocation, so creating
// views and checking shapes in the training step's hot path never calls malloc).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mixtrain {

constexpr int kMaxDims = 6;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> d);
  template <typename It>
  Dims(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return d_[static_cast<size_t>(i)]; }
  int64_t back() const { return d_[static_cast<size_t>(n_ - 1)]; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  void push_back(int64_t v);  // throws ShapeError past kMaxDims
  // Product of the extents (1 for a scalar); throws ShapeError on a negative extent or overflow.
  int64_t numel() const;
  std::string to_string() const;  // "(2, 3, 4)"
  friend bool operator==(const Dims& a, const Dims& b);

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// Row-major (C order) strides of a shape, in elements.
Strides contiguous_strides(const Shape& shape);

}  // namespace mixtrain
