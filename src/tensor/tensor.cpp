// Tensor: creation, views, copies and casts.
#include "mixtrain/tensor/tensor.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <optional>

#include "mixtrain/core/profiler.h"
#include "mixtrain/numeric/stochastic.h"
#include "tensor/meta.h"

namespace mixtrain {
namespace {

int wrap_dim(int d, int nd, const char* op, const Tensor& t) {
  const int w = d < 0 ? d + nd : d;
  if (w < 0 || w >= nd)
    throw ShapeError(std::string(op) + ": dim " + std::to_string(d) + " out of range for " + t.to_string());
  return w;
}

// Uniform in [0, 1) from 24 random bits: exactly representable in fp32.
inline float unit_float(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// Fills n contiguous f32 values, element i from f(i); parallel for large n. The value of element i
// depends only on i, so results do not depend on the thread count.
template <typename F>
void fill_f32(float* dst, int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = f(i);
}

}  // namespace

// ---- creation ------------------------------------------------------------------------------------

namespace {
// The bytes of a contiguous tensor of `shape` in `dtype`; ShapeError naming `op` if they overflow.
int64_t byte_count(const Shape& shape, DType dtype, const char* op) {
  const int64_t n = shape.numel();  // checks negative extents and overflow
  const auto esize = static_cast<int64_t>(dtype_size(dtype));
  if (n > INT64_MAX / esize)
    throw ShapeError(std::string(op) + ": " + shape.to_string() + " of " + std::string(dtype_name(dtype)) +
                     " overflows the byte count");
  return n * esize;
}
}  // namespace

Tensor Tensor::contiguous_over(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory category, Device device) {
  Allocator& allocator = allocator_for(device);
  const int64_t bytes = byte_count(shape, dtype, "Tensor::empty");
  if (device.is_meta()) meta_note_tensor(shape, dtype);
  return contiguous_over(std::make_shared<Storage>(static_cast<size_t>(bytes), category, allocator), shape,
                         dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemCategory category, Device device) {
  Tensor t = empty(shape, dtype, category, device);
  if (!t.is_meta()) std::memset(t.raw_data(), 0, t.nbytes());  // all-zero bits is +0 in every dtype
  return t;
}

Tensor Tensor::reserved(const Shape& shape, DType dtype, int64_t used_begin, int64_t used_end,
                        MemCategory category, Device device) {
  const int64_t bytes = byte_count(shape, dtype, "Tensor::reserved");
  if (used_begin < 0 || used_begin > used_end || used_end > shape.numel())
    throw ShapeError("Tensor::reserved: used elements [" + std::to_string(used_begin) + ", " +
                     std::to_string(used_end) + ") outside " + shape.to_string());
  if (device.is_meta()) meta_note_tensor(shape, dtype);
  const auto esize = static_cast<int64_t>(dtype_size(dtype));
  return contiguous_over(
      Storage::reserved(static_cast<size_t>(bytes), static_cast<size_t>((used_end - used_begin) * esize),
                        category, device),
      shape, dtype);
}

Tensor Tensor::full(const Shape& shape, DType dtype, double value, MemCategory category) {
  Tensor t = empty(shape, dtype, category);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                           MemCategory category) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw ShapeError("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                     shape.to_string());
  Tensor t = empty(shape, dtype, category);
  if (!t.is_meta()) convert_any(values.data(), DType::f64, t.raw_data(), dtype, values.size());
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype,
                           MemCategory category) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw ShapeError("Tensor::from_floats: " + std::to_string(values.size()) + " values for shape " +
                     shape.to_string());
  Tensor t = empty(shape, dtype, category);
  if (!t.is_meta()) convert_any(values.data(), DType::f32, t.raw_data(), dtype, values.size());
  return t;
}

Tensor Tensor::from_ints(const std::vector<int32_t>& values, const Shape& shape, MemCategory category) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw ShapeError("Tensor::from_ints: " + std::to_string(values.size()) + " values for shape " +
                     shape.to_string());
  Tensor t = empty(shape, DType::i32, category);
  if (!values.empty() && !t.is_meta())
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

Tensor Tensor::randn(const Shape& shape, DType dtype, uint64_t seed, float mean, float stddev,
                     MemCategory category) {
  const int64_t n = shape.numel();
  Tensor f = empty(shape, DType::f32, dtype == DType::f32 ? category : MemCategory::workspace);
  // Box-Muller on two independent counters per element.
  if (!f.is_meta())
    fill_f32(f.data<float>(), n, [&](int64_t i) {
      const auto c = static_cast<uint64_t>(i) * 2;
      const float u1 = 1.0f - unit_float(counter_rng(seed, c));  // (0, 1]: log is finite
      const float u2 = unit_float(counter_rng(seed, c + 1));
      const float r = std::sqrt(-2.0f * std::log(u1));
      return mean + stddev * r * std::cos(2.0f * std::numbers::pi_v<float> * u2);
    });
  return dtype == DType::f32 ? f : f.to(dtype, category);
}

Tensor Tensor::rand_uniform(const Shape& shape, DType dtype, uint64_t seed, float lo, float hi,
                            MemCategory category) {
  const int64_t n = shape.numel();
  Tensor f = empty(shape, DType::f32, dtype == DType::f32 ? category : MemCategory::workspace);
  if (!f.is_meta())
    fill_f32(f.data<float>(), n, [&](int64_t i) {
      return lo + (hi - lo) * unit_float(counter_rng(seed, static_cast<uint64_t>(i)));
    });
  return dtype == DType::f32 ? f : f.to(dtype, category);
}

// ---- properties ------------------------------------------------------------------------------------

int64_t Tensor::size(int d) const { return shape_[wrap_dim(d, dim(), "Tensor::size", *this)]; }
int64_t Tensor::stride(int d) const { return strides_[wrap_dim(d, dim(), "Tensor::stride", *this)]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape_[d] == 1) continue;  // stride of a size-1 dim does not matter
    if (strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

std::string Tensor::to_string() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_.to_string();
}

void* Tensor::raw_data() const {
  if (!storage_) throw ArgumentError("Tensor: access to the data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::check_dtype(DType expected, const char* op) const {
  if (!defined()) throw ArgumentError(std::string(op) + ": tensor is undefined");
  if (dtype_ != expected)
    throw DTypeError(std::string(op) + ": expected " + std::string(dtype_name(expected)) + ", got " +
                     to_string());
}

// ---- views -----------------------------------------------------------------------------------------

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  const int w = wrap_dim(d, dim(), "Tensor::slice", *this);
  const int64_t n = shape_[w];
  if (step <= 0) throw ShapeError("Tensor::slice: step must be positive, got " + std::to_string(step));
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0 || end > n || start > end)
    throw ShapeError("Tensor::slice: range [" + std::to_string(start) + ", " + std::to_string(end) +
                     ") out of bounds for dim " + std::to_string(d) + " of " + to_string());
  Tensor t = *this;
  t.offset_ += start * strides_[w];
  t.shape_[w] = (end - start + step - 1) / step;
  t.strides_[w] *= step;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  const int w = wrap_dim(d, dim(), "Tensor::select", *this);
  if (index < 0) index += shape_[w];
  if (index < 0 || index >= shape_[w])
    throw ShapeError("Tensor::select: index " + std::to_string(index) + " out of bounds for dim " +
                     std::to_string(d) + " of " + to_string());
  Tensor t = *this;
  t.offset_ += index * strides_[w];
  Shape s;
  Strides st;
  for (int i = 0; i < dim(); ++i)
    if (i != w) {
      s.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  t.shape_ = s;
  t.strides_ = st;
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int a = wrap_dim(d0, dim(), "Tensor::transpose", *this);
  const int b = wrap_dim(d1, dim(), "Tensor::transpose", *this);
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError("Tensor::reshape: more than one -1 in " + shape.to_string());
      infer = i;
    } else if (s[i] < 0) {
      throw ShapeError("Tensor::reshape: negative extent in " + shape.to_string());
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw ShapeError("Tensor::reshape: cannot infer -1 in " + shape.to_string() + " from " + to_string());
    s[infer] = numel() / known;
  }
  if (s.numel() != numel())
    throw ShapeError("Tensor::reshape: " + to_string() + " has " + std::to_string(numel()) +
                     " elements, shape " + shape.to_string() + " needs " + std::to_string(s.numel()));
  if (!is_contiguous())
    throw ShapeError("Tensor::reshape: " + to_string() + " is not contiguous (call contiguous() first)");
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  const int nd = dim();
  const int w = d < 0 ? d + nd + 1 : d;
  if (w < 0 || w > nd)
    throw ShapeError("Tensor::unsqueeze: dim " + std::to_string(d) + " out of range for " + to_string());
  Shape s;
  Strides st;
  for (int i = 0; i <= nd; ++i) {
    if (i == w) {
      s.push_back(1);
      st.push_back(i < nd ? strides_[i] * shape_[i] : 1);
    }
    if (i < nd) {
      s.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  }
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = st;
  return t;
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  if (shape.size() != strides.size())
    throw ShapeError("Tensor::as_strided: shape " + shape.to_string() + " and strides " +
                     strides.to_string() + " differ in rank");
  const int64_t n = shape.numel();
  int64_t lo = offset_ + offset, hi = offset_ + offset;
  for (int d = 0; d < shape.size() && n > 0; ++d) {
    const int64_t span = strides[d] * (shape[d] - 1);
    (span < 0 ? lo : hi) += span;
  }
  const auto capacity = static_cast<int64_t>(storage_ ? storage_->bytes() / dtype_size(dtype_) : 0);
  if (n > 0 && (lo < 0 || hi >= capacity))
    throw ShapeError("Tensor::as_strided: view " + shape.to_string() + " strides " + strides.to_string() +
                     " at offset " + std::to_string(offset) + " exceeds the storage of " + to_string());
  Tensor t = *this;
  t.offset_ += offset;
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

// ---- copies ----------------------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone(category());
}

Tensor Tensor::clone(MemCategory category) const {
  Tensor t = empty(shape_, dtype_, category, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype, MemCategory category) const {
  std::optional<ProfileScope> prof;
  if (dtype != dtype_) prof.emplace(WorkKind::casts);
  Tensor t = empty(shape_, dtype, category, device());
  if (prof) prof->moves(static_cast<int64_t>(nbytes() + t.nbytes()));
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) throw ArgumentError("Tensor::copy_from: undefined tensor");
  if (!(shape_ == src.shape_))
    throw ShapeError("Tensor::copy_from: shape mismatch, destination " + to_string() + " source " +
                     src.to_string());
  if (is_meta()) return;  // a meta tensor holds no values (any source may be copied "into" it)
  if (src.is_meta())
    throw ArgumentError("Tensor::copy_from: the source " + src.to_string() + " is a meta tensor (no data)");
  if (is_contiguous() && src.is_contiguous()) {
    convert_any(src.raw_data(), src.dtype_, raw_data(), dtype_, static_cast<size_t>(numel()));
    return;
  }
  // Both contiguous along the last dim: convert row by row through the bulk conversions.
  if (dim() >= 1 && strides_.back() == 1 && src.strides_.back() == 1) {
    Shape outer;
    Strides so, dso;
    for (int d = 0; d + 1 < dim(); ++d) {
      outer.push_back(shape_[d]);
      so.push_back(src.strides_[d]);
      dso.push_back(strides_[d]);
    }
    const auto row = static_cast<size_t>(shape_.back());
    const char* s = static_cast<const char*>(src.raw_data());
    char* d = static_cast<char*>(raw_data());
    const auto ses = static_cast<int64_t>(dtype_size(src.dtype_)),
               des = static_cast<int64_t>(dtype_size(dtype_));
    std::vector<int64_t> src_off(static_cast<size_t>(outer.numel()));
    for_each_offset(outer, so, [&](int64_t i, int64_t off) { src_off[static_cast<size_t>(i)] = off; });
    for_each_offset(outer, dso, [&](int64_t i, int64_t off) {
      convert_any(s + src_off[static_cast<size_t>(i)] * ses, src.dtype_, d + off * des, dtype_, row);
    });
    return;
  }
  // Strided: gather the source row-major, then scatter into the destination.
  const void* s = src.raw_data();
  void* d = raw_data();
  std::vector<int64_t> dst_off(static_cast<size_t>(numel()));
  for_each_offset(shape_, strides_, [&](int64_t i, int64_t off) { dst_off[static_cast<size_t>(i)] = off; });
  for_each_offset(src.shape_, src.strides_, [&](int64_t i, int64_t off) {
    store_from_f64(d, dtype_, dst_off[static_cast<size_t>(i)], load_as_f64(s, src.dtype_, off));
  });
}

void Tensor::fill(double value) {
  if (is_meta()) return;
  void* d = raw_data();
  if (is_contiguous() && numel() > 0) {
    store_from_f64(d, dtype_, 0, value);
    const size_t es = dtype_size(dtype_);
    char* p = static_cast<char*>(d);
    for (int64_t i = 1; i < numel(); ++i) std::memcpy(p + i * static_cast<int64_t>(es), p, es);
    return;
  }
  for_each_offset(shape_, strides_, [&](int64_t, int64_t off) { store_from_f64(d, dtype_, off, value); });
}

void Tensor::zero() { fill(0.0); }

// ---- element access ----------------------------------------------------------------------------------

double Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("Tensor::item: " + to_string() + " has " + std::to_string(numel()) + " elements, not 1");
  if (is_meta()) return 0.0;  // a meta value reads as zero: finite, so a meta run never diverges
  return load_as_f64(raw_data(), dtype_, 0);
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  if (static_cast<int>(index.size()) != dim())
    throw ShapeError("Tensor::at: " + std::to_string(index.size()) + " indices for " + to_string());
  int64_t off = 0;
  int d = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape_[d])
      throw ShapeError("Tensor::at: index " + std::to_string(i) + " out of bounds for dim " +
                       std::to_string(d) + " of " + to_string());
    off += i * strides_[d++];
  }
  if (is_meta()) return 0.0;
  return load_as_f64(raw_data(), dtype_, off);
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  if (v.empty() || is_meta()) return v;
  const void* s = raw_data();
  for_each_offset(shape_, strides_,
                  [&](int64_t i, int64_t off) { v[static_cast<size_t>(i)] = load_as_f64(s, dtype_, off); });
  return v;
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  if (v.empty() || is_meta()) return v;
  if (is_contiguous()) {
    convert_any(raw_data(), dtype_, v.data(), DType::f32, v.size());
    return v;
  }
  const void* s = raw_data();
  for_each_offset(shape_, strides_,
                  [&](int64_t i, int64_t off) { v[static_cast<size_t>(i)] = load_as_f32(s, dtype_, off); });
  return v;
}

std::vector<int32_t> Tensor::to_ints() const {
  check_dtype(DType::i32, "Tensor::to_ints");
  std::vector<int32_t> v(static_cast<size_t>(numel()));
  if (is_meta()) return v;
  const auto* s = static_cast<const int32_t*>(raw_data());
  for_each_offset(shape_, strides_, [&](int64_t i, int64_t off) { v[static_cast<size_t>(i)] = s[off]; });
  return v;
}

}  // namespace mixtrain
