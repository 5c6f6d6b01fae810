// Tensor: a typed, strided view into a Storage. Copying a Tensor is cheap and shares storage
// (like torch.Tensor); clone() copies the data. Views (slice, transpose, reshape) never copy.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/core/error.h"
#include "mixtrain/tensor/dtype.h"
#include "mixtrain/tensor/shape.h"
#include "mixtrain/tensor/storage.h"

namespace mixtrain {

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false

  // --- creation ----------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype, MemCategory category = MemCategory::activations,
                      Device device = default_device());
  static Tensor zeros(const Shape& shape, DType dtype, MemCategory category = MemCategory::activations,
                      Device device = default_device());
  static Tensor full(const Shape& shape, DType dtype, double value,
                     MemCategory category = MemCategory::activations);
  // Zeros of which only elements [used_begin, used_end) (flat, row-major) may be written: the rest
  // is address space, never memory, and only those elements are charged to the tracker (a ZeRO-2
  // rank's gradient arena, nn/parameters.h: views of every parameter, the rank's part alone
  // written). Elements outside may be read (zeros) but a write commits their pages, uncharged.
  static Tensor reserved(const Shape& shape, DType dtype, int64_t used_begin, int64_t used_end,
                         MemCategory category, Device device = default_device());
  // Values are given as doubles and rounded to `dtype` (round to nearest even).
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                            MemCategory category = MemCategory::activations);
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype,
                            MemCategory category = MemCategory::activations);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape,
                          MemCategory category = MemCategory::data);
  // Seeded initialisation, computed in fp32 from a counter-based RNG (element i depends only on
  // (seed, i)), then rounded to dtype: same seed, same values, whatever the thread count.
  static Tensor randn(const Shape& shape, DType dtype, uint64_t seed, float mean = 0.f, float stddev = 1.f,
                      MemCategory category = MemCategory::activations);
  static Tensor rand_uniform(const Shape& shape, DType dtype, uint64_t seed, float lo = 0.f, float hi = 1.f,
                             MemCategory category = MemCategory::activations);

  // --- properties ---------------------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_meta() const { return storage_ && storage_->device().is_meta(); }
  MemCategory category() const { return storage_ ? storage_->category() : MemCategory::other; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int dim() const { return shape_.size(); }
  int64_t size(int d) const;    // negative d counts from the end
  int64_t stride(int d) const;  // in elements
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  int64_t offset() const { return offset_; }  // in elements, from the start of storage
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string to_string() const;  // "bf16(2, 3)" — used in error messages

  // Raw data (points at element 0 of this view).
  void* raw_data() const;
  // Typed data; throws DTypeError if T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>::value, "Tensor::data");
    return static_cast<T*>(raw_data());
  }

  // --- views (share storage) ------------------------------------------------------------------
  Tensor slice(int d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int d, int64_t index) const;  // removes dimension d
  Tensor transpose(int d0, int d1) const;
  // Same data, new shape; the tensor must be contiguous (throws ShapeError otherwise).
  // One extent may be -1 (inferred).
  Tensor reshape(const Shape& shape) const;
  Tensor unsqueeze(int d) const;
  // A view with explicit shape and strides (elements) starting `offset` elements after this
  // view's first element; throws ShapeError if any element would fall outside the storage.
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset = 0) const;

  // --- copies ---------------------------------------------------------------------------------
  Tensor contiguous() const;  // itself if already contiguous
  Tensor clone(MemCategory category) const;
  Tensor clone() const { return clone(category()); }
  // A contiguous copy in another dtype (same values rounded to nearest even).
  Tensor to(DType dtype, MemCategory category) const;
  Tensor to(DType dtype) const { return to(dtype, category()); }
  // Copies (and casts) src into this tensor element by element; shapes must be equal.
  void copy_from(const Tensor& src);
  void fill(double value);
  void zero();

  // --- element access (slow; tests, tools, scalars) ---------------------------------------------
  double item() const;  // the single element of a 1-element tensor
  double at(std::initializer_list<int64_t> index) const;
  std::vector<float> to_floats() const;    // row-major copy, any dtype
  std::vector<double> to_doubles() const;  // row-major copy, any dtype
  std::vector<int32_t> to_ints() const;    // i32 only

  void check_dtype(DType expected, const char* op) const;

 private:
  // A contiguous view of all of `storage` (a new tensor's).
  static Tensor contiguous_over(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::f32;
};

// Iterates the multi-index of a shape in row-major order and yields the element offset of each
// (slow, generic path for strided tensors).
template <typename F>
void for_each_offset(const Shape& shape, const Strides& strides, F&& f) {
  const int nd = shape.size();
  const int64_t n = shape.numel();
  if (n == 0) return;
  int64_t idx[kMaxDims] = {};
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace mixtrain
