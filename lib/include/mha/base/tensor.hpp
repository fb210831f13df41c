// The library's tensors (weights, inputs, outputs): an N-dimensional C-order
// array that owns its elements in large_array.hpp's memory, so that a layer's
// large matrices get huge pages when they are first written (random
// initialization, file reads). Elements are numbers (float, double, ...),
// left uninitialized until written, as a buffer that is about to be filled.
//
//   mha::Tensor<float, 2> W({d_model, h * d_k});  // (d_model, h*d_k), unset
//   W.fill(0);                                     // or Tensor<float, 2>::full(shape, 0)
//   W(0, 1) = 1;                                   // W.data()[0 * W.shape()[1] + 1]
//   gemm(..., W.data(), W.shape()[1], ...);
//
// Only what the kernel's callers need: no views, no arithmetic, and so
// none of xtensor's 116,000 preprocessed lines in every header that holds
// weights.
#pragma once

#include <cstddef>

#include "mha/base/large_array.hpp"

namespace mha {

// The extents of an N-dimensional array, outermost first: {rows, cols}.
template <std::size_t N>
struct TensorShape {
  std::size_t extent[N] = {};

  std::size_t operator[](std::size_t axis) const { return extent[axis]; }
  std::size_t& operator[](std::size_t axis) { return extent[axis]; }
  const std::size_t* begin() const { return extent; }
  const std::size_t* end() const { return extent + N; }
  static constexpr std::size_t size() { return N; }
  bool operator==(const TensorShape& o) const {
    for (std::size_t i = 0; i < N; ++i)
      if (extent[i] != o.extent[i]) return false;
    return true;
  }
  bool operator!=(const TensorShape& o) const { return !(*this == o); }
};

template <class T, std::size_t N>
class Tensor {
 public:
  using value_type = T;

  Tensor() = default;  // shape all 0, no elements
  explicit Tensor(const TensorShape<N>& shape) { resize(shape); }
  static Tensor from_shape(const TensorShape<N>& shape) { return Tensor(shape); }
  static Tensor full(const TensorShape<N>& shape, T value) {  // NumPy's np.full
    Tensor t(shape);
    t.fill(value);
    return t;
  }

  Tensor(const Tensor& o) : Tensor(o.shape_) { copy_from(o.data_); }
  Tensor(Tensor&& o) noexcept : shape_(o.shape_), size_(o.size_), data_(o.data_) { o.release(); }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      resize(o.shape_);
      copy_from(o.data_);
    }
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      free_array(data_);
      shape_ = o.shape_, size_ = o.size_, data_ = o.data_;
      o.release();
    }
    return *this;
  }
  ~Tensor() { free_array(data_); }

  // New extents; the elements are kept when their number does not change,
  // else left unset (as a new tensor's).
  void resize(const TensorShape<N>& shape) {
    std::size_t n = 1;
    for (std::size_t e : shape) n *= e;
    if (n != size_) {
      T* fresh = n ? ArrayAllocator<T>().allocate(n) : nullptr;
      free_array(data_);
      data_ = fresh, size_ = n;
    }
    shape_ = shape;
  }
  void fill(T value) {
    for (std::size_t i = 0; i < size_; ++i) data_[i] = value;
  }

  const TensorShape<N>& shape() const { return shape_; }
  std::size_t size() const { return size_; }
  T* data() { return data_; }  // null when empty
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  // The element at (i0, i1, ...), one index per axis.
  template <class... I>
  T& operator()(I... index) {
    return data_[offset(index...)];
  }
  template <class... I>
  const T& operator()(I... index) const {
    return data_[offset(index...)];
  }

 private:
  template <class... I>
  std::size_t offset(I... index) const {
    static_assert(sizeof...(I) == N, "one index per axis");
    std::size_t at = 0, axis = 0;
    ((at = at * shape_[axis++] + static_cast<std::size_t>(index)), ...);
    return at;
  }
  void copy_from(const T* from) {
    for (std::size_t i = 0; i < size_; ++i) data_[i] = from[i];
  }
  void release() {
    shape_ = TensorShape<N>{};
    size_ = 0, data_ = nullptr;
  }

  TensorShape<N> shape_;
  std::size_t size_ = 0;
  T* data_ = nullptr;
};

}  // namespace mha
